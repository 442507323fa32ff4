-- Tables of the shared research memory. Every table has a stable record id (primary key) and
-- written_at_ns: the writer's clock when the record was spooled; on re-ingest the newer write wins.
-- JSON columns are VARCHAR holding canonical JSON (query them with ->> / json_extract).

CREATE TABLE endpoints (
    endpoint        VARCHAR PRIMARY KEY,
    description     VARCHAR,
    model           VARCHAR NOT NULL,
    model_revision  VARCHAR,
    hardware        VARCHAR,
    gpu_count       INTEGER,
    engine          VARCHAR NOT NULL,
    engine_version  VARCHAR,
    engine_args     VARCHAR[],
    sla             VARCHAR,          -- JSON
    traffic_kind    VARCHAR,
    updated_at      TIMESTAMP,
    written_at_ns   BIGINT NOT NULL
);

CREATE TABLE campaigns (
    campaign_id          VARCHAR PRIMARY KEY,
    campaign             VARCHAR NOT NULL,
    endpoint             VARCHAR NOT NULL,
    status               VARCHAR NOT NULL,
    stop_reason          VARCHAR,
    started_at           TIMESTAMP,
    finished_at          TIMESTAMP,
    baseline_config_hash VARCHAR,
    baseline_engine_args VARCHAR[],
    baseline_capacity    DOUBLE,
    best_config_hash     VARCHAR,
    best_engine_args     VARCHAR[],
    best_capacity        DOUBLE,
    total_gain_ratio     DOUBLE,
    dagster_run_ids      VARCHAR[],
    notes                VARCHAR,
    written_at_ns        BIGINT NOT NULL
);

CREATE TABLE experiments (
    experiment_id        VARCHAR PRIMARY KEY,
    endpoint             VARCHAR NOT NULL,
    campaign_id          VARCHAR NOT NULL,
    -- conditions ("same conditions" = all seven equal)
    model                VARCHAR NOT NULL,
    model_revision       VARCHAR NOT NULL,
    hardware             VARCHAR NOT NULL,
    gpu_count            INTEGER NOT NULL,
    engine               VARCHAR NOT NULL,
    engine_version       VARCHAR NOT NULL,
    workload_signature   VARCHAR NOT NULL,
    -- workload traits that explain disagreements
    decode_share         DOUBLE,
    prompt_tokens_p50    DOUBLE,
    output_tokens_p50    DOUBLE,
    prefix_reuse         DOUBLE,
    bottleneck           VARCHAR NOT NULL,
    technique            VARCHAR NOT NULL,
    change               VARCHAR NOT NULL,  -- JSON engine-argument diff
    change_signature     VARCHAR NOT NULL,  -- canonical JSON of the diff (sorted keys)
    base_config_hash     VARCHAR,
    candidate_config_hash VARCHAR,
    hypothesis           VARCHAR,
    prediction           VARCHAR,
    falsification        VARCHAR,
    verdict              VARCHAR NOT NULL CHECK (verdict IN ('better', 'same', 'worse', 'invalid')),
    invalid_reason       VARCHAR,
    capacity_ratio       DOUBLE,
    baseline_capacity    DOUBLE,
    candidate_capacity   DOUBLE,
    noise_threshold      DOUBLE,
    noise_rel_spread     DOUBLE,
    repeats              INTEGER,
    lossless             BOOLEAN NOT NULL,
    correctness          VARCHAR,           -- JSON
    needs_review         BOOLEAN NOT NULL,
    evidence             VARCHAR,
    run_ids              VARCHAR[],
    dagster_run_ids      VARCHAR[],
    asset_keys           VARCHAR[],
    created_at           TIMESTAMP NOT NULL,
    written_at_ns        BIGINT NOT NULL
);

CREATE TABLE confirmations (
    experiment_id   VARCHAR PRIMARY KEY,
    endpoint        VARCHAR NOT NULL,
    campaign_id     VARCHAR NOT NULL,
    new_config_hash VARCHAR,
    engine_args     VARCHAR[],
    note            VARCHAR,
    dagster_run_id  VARCHAR,
    confirmed_at    TIMESTAMP NOT NULL,
    written_at_ns   BIGINT NOT NULL
);

CREATE TABLE skips (
    skip_id             VARCHAR PRIMARY KEY,
    endpoint            VARCHAR NOT NULL,
    campaign_id         VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,
    model_revision      VARCHAR NOT NULL,
    hardware            VARCHAR NOT NULL,
    gpu_count           INTEGER NOT NULL,
    engine              VARCHAR NOT NULL,
    engine_version      VARCHAR NOT NULL,
    workload_signature  VARCHAR NOT NULL,
    technique           VARCHAR NOT NULL,
    change_signature    VARCHAR NOT NULL,
    reason              VARCHAR NOT NULL,
    prior_experiment_id VARCHAR,
    prior_verdict       VARCHAR,
    dagster_run_id      VARCHAR,
    created_at          TIMESTAMP NOT NULL,
    written_at_ns       BIGINT NOT NULL
);

CREATE TABLE findings (
    finding_id     VARCHAR PRIMARY KEY,
    endpoint       VARCHAR NOT NULL,
    campaign_id    VARCHAR,
    kind           VARCHAR NOT NULL CHECK (kind IN ('finding', 'lesson')),
    bottleneck     VARCHAR NOT NULL,
    technique      VARCHAR,
    text           VARCHAR NOT NULL,
    confidence     VARCHAR,
    experiment_ids VARCHAR[],
    conditions     VARCHAR,               -- JSON, optional
    created_at     TIMESTAMP NOT NULL,
    written_at_ns  BIGINT NOT NULL
);

CREATE TABLE open_questions (
    question_id             VARCHAR PRIMARY KEY,
    endpoint                VARCHAR NOT NULL,
    campaign_id             VARCHAR,
    question                VARCHAR NOT NULL,
    bottleneck              VARCHAR,
    rationale               VARCHAR,
    status                  VARCHAR NOT NULL CHECK (status IN ('open', 'answered', 'dropped')),
    answer                  VARCHAR,
    answered_by_campaign_id VARCHAR,
    created_at              TIMESTAMP NOT NULL,
    written_at_ns           BIGINT NOT NULL
);

CREATE TABLE recipe_results (
    result_id      VARCHAR PRIMARY KEY,
    endpoint       VARCHAR NOT NULL,
    campaign_id    VARCHAR,
    recipe         VARCHAR NOT NULL,
    step           VARCHAR NOT NULL,
    vary           VARCHAR NOT NULL,
    value          DOUBLE NOT NULL,
    rate           DOUBLE,
    metrics        VARCHAR,               -- JSON
    conclusion     VARCHAR,
    config_hash    VARCHAR,
    dagster_run_id VARCHAR,
    asset_key      VARCHAR,
    created_at     TIMESTAMP NOT NULL,
    written_at_ns  BIGINT NOT NULL
);

CREATE TABLE runs (
    run_id           VARCHAR PRIMARY KEY,
    endpoint         VARCHAR NOT NULL,
    campaign_id      VARCHAR,
    experiment_id    VARCHAR,
    kind             VARCHAR NOT NULL,
    config_hash      VARCHAR NOT NULL,
    engine_args      VARCHAR[],
    capacity_rps     DOUBLE,
    capacity_per_gpu DOUBLE,
    knee_rate        DOUBLE,
    validity         VARCHAR NOT NULL,
    invalid_reason   VARCHAR,
    steps            VARCHAR,              -- JSON list of StepResult
    started_at       TIMESTAMP,
    dagster_run_id   VARCHAR,
    asset_key        VARCHAR,
    created_at       TIMESTAMP NOT NULL,
    written_at_ns    BIGINT NOT NULL
);
