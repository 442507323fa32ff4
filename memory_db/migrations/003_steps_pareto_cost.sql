-- Analyst-ready sweep steps, Pareto fronts, cost and energy (issue 14). Documented in docs/memory.md.

-- Price per GPU-hour (endpoint YAML hardware.price_per_gpu_hour_usd) and the GPU divisor of the
-- sweep, stored with each run: the price that held when it was measured.
ALTER TABLE endpoints ADD COLUMN price_per_gpu_hour_usd DOUBLE;
ALTER TABLE runs ADD COLUMN gpu_divisor INTEGER;
ALTER TABLE runs ADD COLUMN price_per_gpu_hour_usd DOUBLE;

-- One row per sweep step of every run: rate (or users), every latency percentile, errors, tokens/s,
-- GPU telemetry where it was sampled (NULL on CPU hosts), energy per token and $ per million tokens.
CREATE OR REPLACE VIEW v_run_steps AS
WITH s AS (
    SELECT r.*, x.step_index, x.st
    FROM runs r,
         LATERAL (SELECT unnest(generate_series(0, json_array_length(r.steps)::BIGINT - 1)) AS step_index,
                         json_extract(r.steps, '$[' || step_index || ']') AS st) x
), flat AS (
    SELECT s.endpoint, s.run_id, s.campaign_id, s.experiment_id, s.kind, s.config_hash, s.engine_args,
           s.validity AS run_validity, s.started_at AS run_started_at,
           coalesce(s.gpu_divisor, greatest(ep.gpu_count, 1), 1) AS gpu_divisor,
           coalesce(s.price_per_gpu_hour_usd, ep.price_per_gpu_hour_usd) AS price_per_gpu_hour_usd,
           s.step_index,
           (st->>'target_rate')::DOUBLE AS target_rate,
           (st->>'users')::INTEGER AS users,  -- concurrency sweeps: closed-loop users held (NULL: open loop)
           (st->>'achieved_rate')::DOUBLE AS achieved_rate,
           (st->>'throughput_rps')::DOUBLE AS throughput_rps,
           (st->>'output_tokens_per_s')::DOUBLE AS output_tokens_per_s,
           (st->>'duration_s')::DOUBLE AS duration_s,
           (st->>'requests')::INTEGER AS requests,
           (st->>'errors')::INTEGER AS errors,
           (st->>'error_rate')::DOUBLE AS error_rate,
           (st->>'cut_requests')::INTEGER AS cut_requests,
           (st->>'within_sla')::BOOLEAN AS within_sla,
           st->>'validity' AS step_validity,
           st->>'invalid_reason' AS step_invalid_reason,
           (st->'ttft_ms'->>'p50')::DOUBLE AS ttft_p50_ms, (st->'ttft_ms'->>'p90')::DOUBLE AS ttft_p90_ms,
           (st->'ttft_ms'->>'p95')::DOUBLE AS ttft_p95_ms, (st->'ttft_ms'->>'p99')::DOUBLE AS ttft_p99_ms,
           (st->'ttft_ms'->>'mean')::DOUBLE AS ttft_mean_ms,
           (st->'itl_ms'->>'p50')::DOUBLE AS itl_p50_ms, (st->'itl_ms'->>'p90')::DOUBLE AS itl_p90_ms,
           (st->'itl_ms'->>'p95')::DOUBLE AS itl_p95_ms, (st->'itl_ms'->>'p99')::DOUBLE AS itl_p99_ms,
           (st->'itl_ms'->>'mean')::DOUBLE AS itl_mean_ms,
           (st->'tpot_ms'->>'p50')::DOUBLE AS tpot_p50_ms, (st->'tpot_ms'->>'p90')::DOUBLE AS tpot_p90_ms,
           (st->'tpot_ms'->>'p95')::DOUBLE AS tpot_p95_ms, (st->'tpot_ms'->>'p99')::DOUBLE AS tpot_p99_ms,
           (st->'tpot_ms'->>'mean')::DOUBLE AS tpot_mean_ms,
           (st->'e2e_ms'->>'p50')::DOUBLE AS e2e_p50_ms, (st->'e2e_ms'->>'p90')::DOUBLE AS e2e_p90_ms,
           (st->'e2e_ms'->>'p95')::DOUBLE AS e2e_p95_ms, (st->'e2e_ms'->>'p99')::DOUBLE AS e2e_p99_ms,
           (st->'e2e_ms'->>'mean')::DOUBLE AS e2e_mean_ms,
           (st->'send_lag_ms'->>'p99')::DOUBLE AS send_lag_p99_ms,
           (st->>'cached_prompt_fraction')::DOUBLE AS cached_prompt_fraction,
           (st->'device_metrics'->>'gpu_util_mean')::DOUBLE AS gpu_util_mean,
           (st->'device_metrics'->>'gpu_util_max')::DOUBLE AS gpu_util_max,
           (st->'device_metrics'->>'mem_bw_util_mean')::DOUBLE AS mem_bw_util_mean,
           (st->'device_metrics'->>'memory_used_max_bytes')::DOUBLE AS gpu_memory_used_max_bytes,
           (st->'device_metrics'->>'power_mean_w')::DOUBLE AS gpu_power_mean_w,
           (st->'device_metrics'->>'energy_j')::DOUBLE AS gpu_energy_j,
           make_timestamp(((st->>'started_at')::DOUBLE * 1e6)::BIGINT) AS step_started_at  -- UTC, like every column
    FROM s LEFT JOIN endpoints ep ON ep.endpoint = s.endpoint
)
SELECT *,
       output_tokens_per_s / gpu_divisor AS output_tokens_per_s_per_gpu,
       -- per-user speed: tokens/s one request sees while decoding (1 / time per output token, else 1 / ITL)
       coalesce(1000.0 / nullif(tpot_p50_ms, 0), 1000.0 / nullif(itl_p50_ms, 0)) AS user_tokens_per_s_p50,
       -- J per output token = mean power (W, all GPUs) / output tokens per second; NULL without NVML power
       gpu_power_mean_w / nullif(output_tokens_per_s, 0) AS joules_per_output_token,
       price_per_gpu_hour_usd * gpu_divisor / 3600.0 / nullif(output_tokens_per_s, 0) * 1e6 AS usd_per_million_output_tokens
FROM flat;

-- Per run, the step at capacity: the highest tested rate (or number of users) that held the SLA (valid runs only;
-- production replays and recipe steps are not capacity sweeps).
CREATE OR REPLACE VIEW v_run_capacity_steps AS
SELECT * FROM v_run_steps
WHERE run_validity = 'valid' AND step_validity = 'valid' AND within_sla
  AND kind NOT IN ('production_replay', 'recipe')
QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY users DESC NULLS LAST, target_rate DESC, step_index DESC) = 1;

-- One point per endpoint and configuration, across every run and experiment in memory: median over
-- its repeats of throughput per GPU and per-user speed at capacity, labelled with the technique and
-- engine-argument change that produced it; on_front marks the Pareto front (no other configuration
-- of the endpoint is at least as good on both axes and better on one).
CREATE OR REPLACE VIEW v_pareto_points AS
WITH labelled AS (
    SELECT c.*, e.technique, e.change_signature, e.verdict
    FROM v_run_capacity_steps c LEFT JOIN experiments e ON e.experiment_id = c.experiment_id
), points AS (
    SELECT endpoint, config_hash,
           coalesce(max(technique || ' ' || change_signature), 'baseline') AS label,
           max(technique) AS technique, max(change_signature) AS change_signature, max(verdict) AS verdict,
           string_agg(DISTINCT kind, ',' ORDER BY kind) AS kinds,
           arg_max(engine_args, run_started_at) AS engine_args,
           count(*) AS runs,
           median(target_rate) AS capacity_step_rps,
           median(output_tokens_per_s_per_gpu) AS output_tokens_per_s_per_gpu,
           median(user_tokens_per_s_p50) AS user_tokens_per_s_p50,
           median(tpot_p50_ms) AS tpot_p50_ms,
           median(itl_p50_ms) AS itl_p50_ms,
           median(gpu_power_mean_w) AS gpu_power_mean_w,
           median(joules_per_output_token) AS joules_per_output_token,
           median(usd_per_million_output_tokens) AS usd_per_million_output_tokens,
           max(price_per_gpu_hour_usd) AS price_per_gpu_hour_usd,
           max(gpu_divisor) AS gpu_divisor,
           list(run_id ORDER BY run_id) AS run_ids
    FROM labelled GROUP BY endpoint, config_hash
)
SELECT p.*,
       NOT EXISTS (
           SELECT 1 FROM points q
           WHERE q.endpoint = p.endpoint AND q.config_hash <> p.config_hash
             AND q.output_tokens_per_s_per_gpu >= p.output_tokens_per_s_per_gpu
             AND q.user_tokens_per_s_p50 >= p.user_tokens_per_s_p50
             AND (q.output_tokens_per_s_per_gpu > p.output_tokens_per_s_per_gpu
                  OR q.user_tokens_per_s_p50 > p.user_tokens_per_s_p50)
       ) AND p.output_tokens_per_s_per_gpu IS NOT NULL AND p.user_tokens_per_s_p50 IS NOT NULL AS on_front
FROM points p
ORDER BY p.endpoint, p.output_tokens_per_s_per_gpu DESC NULLS LAST, p.config_hash;
