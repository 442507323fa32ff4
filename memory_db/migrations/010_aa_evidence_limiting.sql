-- The endpoint's noise per class (issue 21): configurations of one endpoint are not equally noisy (on vLLM
-- CPU, those an ITL tail limits moved 9-35% between runs, those the queue limits 0.1-3.9%), so each row
-- says which SLA target limits the configuration it came from (NULL: not resolved, or recorded before),
-- and a floor pools only its own class (loadgen.noise_prior).
ALTER TABLE aa_evidence ADD COLUMN limiting VARCHAR;

-- Per endpoint, protocol, estimator and limiting target: the pooled between-run sd and its df.
CREATE OR REPLACE VIEW v_endpoint_noise_by_limit AS
SELECT endpoint, protocol, estimator, limiting,
       count(*) AS sources,
       sum(df) AS df,
       CASE WHEN sum(df) > 0 THEN sqrt(sum(sum_sq) / sum(df)) END AS between_run_sd,
       max(created_at) AS latest_at
FROM aa_evidence
GROUP BY endpoint, protocol, estimator, limiting;
