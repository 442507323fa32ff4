-- The endpoint's between-run noise (issue 21): the A/A evidence per estimator of every noise floor and
-- every experiment's repeats (loadgen.noise_prior), so later floors of the endpoint start from all of it
-- instead of a default, and an analyst can ask how noisy each endpoint's measurements are. sum_sq is df x the variance of a paired
-- log difference between two runs of one configuration; protocol keys the hardware and sweep settings.
CREATE TABLE aa_evidence (
    evidence_id VARCHAR PRIMARY KEY,
    endpoint VARCHAR NOT NULL,
    campaign_id VARCHAR,
    source VARCHAR NOT NULL,  -- 'reference' or the experiment whose repeats (or adopted floor) these are
    config_hash VARCHAR,
    protocol VARCHAR NOT NULL,
    estimator VARCHAR NOT NULL,
    sweeps INTEGER,
    df INTEGER NOT NULL,
    sum_sq DOUBLE NOT NULL,
    created_at TIMESTAMP,
    written_at_ns BIGINT NOT NULL
);

-- Per endpoint, protocol and estimator: the pooled between-run sd of a paired difference and its df.
CREATE OR REPLACE VIEW v_endpoint_noise AS
SELECT endpoint, protocol, estimator,
       count(*) AS sources,
       sum(df) AS df,
       CASE WHEN sum(df) > 0 THEN sqrt(sum(sum_sq) / sum(df)) END AS between_run_sd,
       max(created_at) AS latest_at
FROM aa_evidence
GROUP BY endpoint, protocol, estimator;
