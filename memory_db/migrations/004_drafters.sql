-- Draft models trained on an endpoint's own traffic for speculative decoding (issue 15).
-- One row per drafter; re-recording the same drafter_id (a verdict, a stale mark) replaces it.
CREATE TABLE drafters (
    drafter_id             VARCHAR PRIMARY KEY,
    endpoint               VARCHAR NOT NULL,
    model_signature        VARCHAR NOT NULL,  -- research.drift.model_fingerprint when trained
    data_signature         VARCHAR NOT NULL,  -- hash of the on-policy prompts and replies
    method                 VARCHAR NOT NULL,  -- vLLM --speculative-config method (draft_model)
    path                   VARCHAR NOT NULL,
    num_speculative_tokens INTEGER NOT NULL,
    layers                 INTEGER NOT NULL,
    steps                  INTEGER NOT NULL,
    train_examples         INTEGER NOT NULL,
    train_tokens           INTEGER NOT NULL,
    heldout_examples       INTEGER NOT NULL,
    train_s                DOUBLE NOT NULL,
    train                  VARCHAR,           -- JSON: lr, losses, data generation time
    acceptance_offline     VARCHAR,           -- JSON: per position, acceptance length, top-1 agreement
    acceptance_served      VARCHAR,           -- JSON: vLLM's spec_decode counters over the harness sweeps
    verdict                VARCHAR CHECK (verdict IS NULL OR verdict IN ('better', 'same', 'worse', 'invalid')),
    correctness            VARCHAR,
    status                 VARCHAR NOT NULL CHECK (status IN ('fresh', 'stale')),
    stale_reason           VARCHAR,
    created_at             TIMESTAMP NOT NULL,
    written_at_ns          BIGINT NOT NULL
);
