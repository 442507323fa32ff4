-- Verdicts with known error rates (issue 21): the effect with its interval and the minimum
-- detectable effect of every interval verdict (loadgen.verdict), so an analyst can ask how small a
-- change each endpoint's harness can see. NULL for verdicts judged by the older threshold rule.
ALTER TABLE experiments ADD COLUMN effect DOUBLE;       -- relative capacity change, +0.12 = +12%
ALTER TABLE experiments ADD COLUMN effect_low DOUBLE;   -- 95% (family-wise) interval
ALTER TABLE experiments ADD COLUMN effect_high DOUBLE;
ALTER TABLE experiments ADD COLUMN mde DOUBLE;          -- minimum detectable effect (80% power) at this noise

CREATE OR REPLACE VIEW v_experiments AS
SELECT e.*,
       c.experiment_id IS NOT NULL AS confirmed,
       c.confirmed_at,
       e.capacity_ratio - 1 AS gain
FROM experiments e
LEFT JOIN confirmations c ON c.experiment_id = e.experiment_id;

-- Per endpoint: the smallest effect its harness could see, latest and typical.
CREATE OR REPLACE VIEW v_endpoint_mde AS
SELECT endpoint,
       count(mde) AS interval_verdicts,
       arg_max(mde, created_at) AS latest_mde,
       median(mde) AS median_mde,
       min(mde) AS best_mde,
       max(created_at) AS latest_at
FROM experiments
WHERE mde IS NOT NULL
GROUP BY endpoint;
