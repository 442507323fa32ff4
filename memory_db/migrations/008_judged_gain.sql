-- The campaign's headline gain by the estimators that judged each adopted change (issue 21): the adopted
-- effects chained, with the products of their interval ends at the stated confidence
-- (research.campaign.judged_gain). total_gain_ratio stays the best / reference rung capacity, which an
-- endpoint judged by its service rate can contradict (x0.91 there for a change confirmed at +10.9%).
-- NULL where nothing was adopted or a verdict had no interval (campaigns recorded before this).
ALTER TABLE campaigns ADD COLUMN judged_gain DOUBLE;
ALTER TABLE campaigns ADD COLUMN judged_gain_low DOUBLE;
ALTER TABLE campaigns ADD COLUMN judged_gain_high DOUBLE;
ALTER TABLE campaigns ADD COLUMN judged_gain_confidence DOUBLE;

CREATE OR REPLACE VIEW v_campaign_history AS
SELECT ca.endpoint, ca.campaign, ca.campaign_id, ca.status, ca.stop_reason, ca.started_at, ca.finished_at,
       ca.baseline_capacity, ca.best_capacity, ca.total_gain_ratio,
       ca.judged_gain, ca.judged_gain_low, ca.judged_gain_high, ca.judged_gain_confidence,
       (SELECT count(*) FROM experiments e WHERE e.campaign_id = ca.campaign_id) AS experiments,
       (SELECT count(*) FROM confirmations c WHERE c.campaign_id = ca.campaign_id) AS confirmed,
       (SELECT count(*) FROM skips s WHERE s.campaign_id = ca.campaign_id) AS skipped,
       (SELECT count(*) FROM runs r WHERE r.campaign_id = ca.campaign_id) AS runs
FROM campaigns ca
ORDER BY ca.endpoint, ca.started_at, ca.campaign_id;
