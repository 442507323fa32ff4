-- Soaks (issue 22): every configuration the harness would adopt is first held at its capacity, then
-- briefly above it (loadgen.soak). The JSON keeps rate, held_s, outcome, overload, diagnosis and
-- reasons; NULL where no soak ran (not adopted, or an experiment recorded before soaks existed).
ALTER TABLE experiments ADD COLUMN soak VARCHAR;  -- JSON

CREATE OR REPLACE VIEW v_experiments AS
SELECT e.*,
       c.experiment_id IS NOT NULL AS confirmed,
       c.confirmed_at,
       e.capacity_ratio - 1 AS gain
FROM experiments e
LEFT JOIN confirmations c ON c.experiment_id = e.experiment_id;

-- One row per soak: what was held, for how long, and how it ended.
CREATE OR REPLACE VIEW v_soaks AS
SELECT experiment_id, endpoint, campaign_id, technique, verdict,
       CAST(json_extract(soak, '$.rate') AS DOUBLE) AS rate,
       CAST(json_extract(soak, '$.held_s') AS DOUBLE) AS held_s,
       json_extract_string(soak, '$.outcome') AS outcome,
       json_extract_string(soak, '$.overload') AS overload,
       json_extract_string(soak, '$.diagnosis') AS diagnosis,
       created_at
FROM experiments
WHERE soak IS NOT NULL;
