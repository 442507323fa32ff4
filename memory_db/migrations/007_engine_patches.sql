-- Engine patches (issue 22): a candidate may run with runtime overlays (engines.overlays), among them a
-- patch of the engine's code that a proposer authored (engines.authored). Each experiment keeps the
-- content hash of every overlay its engine ran with (JSON {name: sha256}) and the authored diff itself;
-- NULL where none was used (or for experiments recorded before this).
ALTER TABLE experiments ADD COLUMN overlays VARCHAR;  -- JSON
ALTER TABLE experiments ADD COLUMN engine_patch VARCHAR;

CREATE OR REPLACE VIEW v_experiments AS
SELECT e.*,
       c.experiment_id IS NOT NULL AS confirmed,
       c.confirmed_at,
       e.capacity_ratio - 1 AS gain
FROM experiments e
LEFT JOIN confirmations c ON c.experiment_id = e.experiment_id;

-- One row per experiment that ran with an authored patch: what it changed and how it was judged.
CREATE OR REPLACE VIEW v_engine_patches AS
SELECT experiment_id, endpoint, campaign_id, technique, verdict, invalid_reason, overlays, engine_patch,
       effect, effect_low, effect_high, created_at
FROM experiments
WHERE engine_patch IS NOT NULL;
