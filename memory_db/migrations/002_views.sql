-- Views for analysts (documented in docs/memory.md). Plain SQL over the tables of 001.

-- Experiments with their confirmation (adopted as the new working baseline) and gain.
CREATE OR REPLACE VIEW v_experiments AS
SELECT e.*,
       c.experiment_id IS NOT NULL AS confirmed,
       c.confirmed_at,
       e.capacity_ratio - 1 AS gain
FROM experiments e
LEFT JOIN confirmations c ON c.experiment_id = e.experiment_id;

-- One row per endpoint: what it is, how much was tried, what held.
CREATE OR REPLACE VIEW v_endpoint_summary AS
WITH names AS (
    SELECT endpoint FROM endpoints UNION SELECT endpoint FROM experiments UNION SELECT endpoint FROM campaigns
), ex AS (
    SELECT endpoint,
           count(*) AS experiments,
           count(*) FILTER (WHERE verdict = 'better') AS better,
           count(*) FILTER (WHERE verdict = 'same') AS same,
           count(*) FILTER (WHERE verdict = 'worse') AS worse,
           count(*) FILTER (WHERE verdict = 'invalid') AS invalid,
           count(*) FILTER (WHERE confirmed) AS confirmed,
           exp(sum(ln(capacity_ratio)) FILTER (WHERE confirmed AND capacity_ratio > 0)) AS confirmed_gain_product,
           max(created_at) AS last_experiment_at
    FROM v_experiments GROUP BY endpoint
), ca AS (
    SELECT endpoint, count(*) AS campaigns, max(total_gain_ratio) AS best_campaign_gain_ratio,
           arg_max(best_capacity, coalesce(finished_at, started_at)) AS latest_best_capacity
    FROM campaigns GROUP BY endpoint
), sk AS (
    SELECT endpoint, count(*) AS skipped FROM skips GROUP BY endpoint
), oq AS (
    SELECT endpoint, count(*) FILTER (WHERE status = 'open') AS open_questions FROM open_questions GROUP BY endpoint
), fi AS (
    SELECT endpoint, count(*) AS findings FROM findings GROUP BY endpoint
)
SELECT n.endpoint, ep.model, ep.engine, ep.engine_version, ep.hardware, ep.gpu_count,
       coalesce(ca.campaigns, 0) AS campaigns,
       coalesce(ex.experiments, 0) AS experiments,
       coalesce(ex.better, 0) AS better,
       coalesce(ex.same, 0) AS same,
       coalesce(ex.worse, 0) AS worse,
       coalesce(ex.invalid, 0) AS invalid,
       coalesce(sk.skipped, 0) AS skipped,
       coalesce(ex.confirmed, 0) AS confirmed,
       ex.confirmed_gain_product,
       ca.best_campaign_gain_ratio,
       ca.latest_best_capacity,
       coalesce(fi.findings, 0) AS findings,
       coalesce(oq.open_questions, 0) AS open_questions,
       ex.last_experiment_at
FROM names n
LEFT JOIN endpoints ep ON ep.endpoint = n.endpoint
LEFT JOIN ex ON ex.endpoint = n.endpoint
LEFT JOIN ca ON ca.endpoint = n.endpoint
LEFT JOIN sk ON sk.endpoint = n.endpoint
LEFT JOIN oq ON oq.endpoint = n.endpoint
LEFT JOIN fi ON fi.endpoint = n.endpoint
ORDER BY n.endpoint;

-- Per bottleneck, technique and endpoint: how the technique did, with the findings written about it.
CREATE OR REPLACE VIEW v_findings_by_bottleneck AS
WITH outcomes AS (
    SELECT bottleneck, technique, endpoint,
           any_value(model) AS model, any_value(gpu_count) AS gpu_count,
           any_value(engine || ' ' || engine_version) AS engine,
           count(*) AS experiments,
           count(*) FILTER (WHERE verdict = 'better') AS better,
           count(*) FILTER (WHERE verdict = 'same') AS same,
           count(*) FILTER (WHERE verdict = 'worse') AS worse,
           count(*) FILTER (WHERE verdict = 'invalid') AS invalid,
           bool_or(confirmed) AS confirmed,
           max(capacity_ratio) FILTER (WHERE verdict <> 'invalid') AS best_ratio,
           min(capacity_ratio) FILTER (WHERE verdict <> 'invalid') AS worst_ratio
    FROM v_experiments GROUP BY bottleneck, technique, endpoint
), notes AS (
    SELECT bottleneck, coalesce(technique, '') AS technique, endpoint,
           list(kind || ' (' || confidence || '): ' || text ORDER BY created_at, finding_id) AS findings
    FROM findings GROUP BY bottleneck, coalesce(technique, ''), endpoint
)
SELECT coalesce(o.bottleneck, n.bottleneck) AS bottleneck,
       coalesce(o.technique, nullif(n.technique, '')) AS technique,
       coalesce(o.endpoint, n.endpoint) AS endpoint,
       o.model, o.gpu_count, o.engine,
       coalesce(o.experiments, 0) AS experiments, coalesce(o.better, 0) AS better,
       coalesce(o.same, 0) AS same, coalesce(o.worse, 0) AS worse, coalesce(o.invalid, 0) AS invalid,
       coalesce(o.confirmed, false) AS confirmed, o.best_ratio, o.worst_ratio,
       coalesce(n.findings, []) AS findings
FROM outcomes o
FULL OUTER JOIN notes n
  ON n.bottleneck = o.bottleneck AND n.technique = o.technique AND n.endpoint = o.endpoint
ORDER BY 1, 2, 3;

-- Per endpoint and technique: the net outcome and the representative experiment with its conditions.
-- helped = at least one 'better'; hurt = at least one 'worse' and no 'better'; neutral = only 'same'.
CREATE OR REPLACE VIEW v_technique_outcomes AS
WITH agg AS (
    SELECT endpoint, technique,
           count(*) FILTER (WHERE verdict = 'better') AS better,
           count(*) FILTER (WHERE verdict = 'same') AS same,
           count(*) FILTER (WHERE verdict = 'worse') AS worse,
           count(*) FILTER (WHERE verdict = 'invalid') AS invalid,
           arg_max(experiment_id, capacity_ratio) FILTER (WHERE verdict = 'better') AS best_experiment,
           arg_min(experiment_id, capacity_ratio) FILTER (WHERE verdict = 'worse') AS worst_experiment,
           arg_max(experiment_id, created_at) FILTER (WHERE verdict = 'same') AS same_experiment
    FROM experiments GROUP BY endpoint, technique
), o AS (
    SELECT *,
           CASE WHEN better > 0 THEN 'helped' WHEN worse > 0 THEN 'hurt'
                WHEN same > 0 THEN 'neutral' ELSE 'invalid' END AS outcome,
           CASE WHEN better > 0 THEN best_experiment WHEN worse > 0 THEN worst_experiment
                ELSE same_experiment END AS representative_experiment
    FROM agg
)
SELECT o.endpoint, o.technique, o.outcome, o.better, o.same, o.worse, o.invalid,
       o.representative_experiment AS experiment_id,
       e.campaign_id, e.bottleneck, e.change, e.capacity_ratio, e.noise_threshold, e.verdict,
       e.model, e.model_revision, e.hardware, e.gpu_count, e.engine, e.engine_version, e.workload_signature,
       e.decode_share, e.prompt_tokens_p50, e.output_tokens_p50, e.prefix_reuse
FROM o LEFT JOIN experiments e ON e.experiment_id = o.representative_experiment;

-- The same technique helped one endpoint and hurt another: both outcomes side by side with the
-- conditions that differ. Fractions differ when they are more than 0.05 apart; token lengths when
-- more than 10% apart; the rest when not equal.
CREATE OR REPLACE VIEW v_disagreements AS
SELECT h.technique,
       h.endpoint AS helped_endpoint,
       x.endpoint AS hurt_endpoint,
       h.capacity_ratio AS helped_ratio,
       x.capacity_ratio AS hurt_ratio,
       h.noise_threshold AS helped_noise_threshold,
       x.noise_threshold AS hurt_noise_threshold,
       h.change AS helped_change,
       x.change AS hurt_change,
       h.bottleneck AS helped_bottleneck,
       x.bottleneck AS hurt_bottleneck,
       h.decode_share AS helped_decode_share,
       x.decode_share AS hurt_decode_share,
       h.prompt_tokens_p50 AS helped_prompt_tokens_p50,
       x.prompt_tokens_p50 AS hurt_prompt_tokens_p50,
       h.output_tokens_p50 AS helped_output_tokens_p50,
       x.output_tokens_p50 AS hurt_output_tokens_p50,
       h.prefix_reuse AS helped_prefix_reuse,
       x.prefix_reuse AS hurt_prefix_reuse,
       h.gpu_count AS helped_gpu_count,
       x.gpu_count AS hurt_gpu_count,
       h.engine || ' ' || h.engine_version AS helped_engine,
       x.engine || ' ' || x.engine_version AS hurt_engine,
       h.model AS helped_model,
       x.model AS hurt_model,
       h.hardware AS helped_hardware,
       x.hardware AS hurt_hardware,
       list_filter([
           CASE WHEN abs(h.decode_share - x.decode_share) > 0.05
                  OR ((h.decode_share IS NULL) <> (x.decode_share IS NULL)) THEN 'decode_share' END,
           CASE WHEN abs(h.prompt_tokens_p50 - x.prompt_tokens_p50) > 0.1 * greatest(h.prompt_tokens_p50, x.prompt_tokens_p50)
                  OR ((h.prompt_tokens_p50 IS NULL) <> (x.prompt_tokens_p50 IS NULL)) THEN 'prompt_tokens' END,
           CASE WHEN abs(h.output_tokens_p50 - x.output_tokens_p50) > 0.1 * greatest(h.output_tokens_p50, x.output_tokens_p50)
                  OR ((h.output_tokens_p50 IS NULL) <> (x.output_tokens_p50 IS NULL)) THEN 'output_tokens' END,
           CASE WHEN abs(h.prefix_reuse - x.prefix_reuse) > 0.05
                  OR ((h.prefix_reuse IS NULL) <> (x.prefix_reuse IS NULL)) THEN 'prefix_reuse' END,
           CASE WHEN h.gpu_count <> x.gpu_count THEN 'gpu_count' END,
           CASE WHEN h.engine <> x.engine OR h.engine_version <> x.engine_version THEN 'engine_version' END,
           CASE WHEN h.model <> x.model OR h.model_revision <> x.model_revision THEN 'model' END,
           CASE WHEN h.hardware <> x.hardware THEN 'hardware' END,
           CASE WHEN h.change <> x.change THEN 'change' END
       ], c -> c IS NOT NULL) AS differing_conditions,
       h.experiment_id AS helped_experiment_id,
       x.experiment_id AS hurt_experiment_id
FROM v_technique_outcomes h
JOIN v_technique_outcomes x ON x.technique = h.technique AND x.endpoint <> h.endpoint
WHERE h.outcome = 'helped' AND x.outcome = 'hurt'
ORDER BY h.technique, h.endpoint, x.endpoint;

-- The campaign history of gains: each confirmed change in order, with the cumulative gain
-- (product of capacity ratios, each against the working baseline it was measured on).
CREATE OR REPLACE VIEW v_campaign_gains AS
SELECT c.endpoint, c.campaign_id, ca.campaign, ca.started_at AS campaign_started_at,
       row_number() OVER w AS step,
       c.confirmed_at, e.experiment_id, e.technique, e.change_signature,
       e.baseline_capacity, e.candidate_capacity, e.capacity_ratio, e.noise_threshold,
       exp(sum(ln(e.capacity_ratio)) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) AS cumulative_gain_ratio,
       c.new_config_hash
FROM confirmations c
JOIN experiments e ON e.experiment_id = c.experiment_id
LEFT JOIN campaigns ca ON ca.campaign_id = c.campaign_id
WINDOW w AS (PARTITION BY c.campaign_id ORDER BY c.confirmed_at, c.experiment_id)
ORDER BY c.endpoint, campaign_started_at, c.campaign_id, step;

-- One row per campaign run: status, capacities and how much was tried, confirmed and skipped.
CREATE OR REPLACE VIEW v_campaign_history AS
SELECT ca.endpoint, ca.campaign, ca.campaign_id, ca.status, ca.stop_reason, ca.started_at, ca.finished_at,
       ca.baseline_capacity, ca.best_capacity, ca.total_gain_ratio,
       (SELECT count(*) FROM experiments e WHERE e.campaign_id = ca.campaign_id) AS experiments,
       (SELECT count(*) FROM confirmations c WHERE c.campaign_id = ca.campaign_id) AS confirmed,
       (SELECT count(*) FROM skips s WHERE s.campaign_id = ca.campaign_id) AS skipped,
       (SELECT count(*) FROM runs r WHERE r.campaign_id = ca.campaign_id) AS runs
FROM campaigns ca
ORDER BY ca.endpoint, ca.started_at, ca.campaign_id;
