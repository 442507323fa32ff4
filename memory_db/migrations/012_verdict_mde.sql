-- One MDE, the verdict's (issue 55): a floor's MDE is an input to the verdicts judged on it, never the MDE
-- of one (a same-class candidate an ITL tail limits is judged by the SLA crossing, one of another class adds
-- that class's variance), so the memory headlines the MDEs of the verdicts actually made (better, same,
-- worse): per verdict, their median with its range per campaign, and per endpoint beside its noise.

-- Every verdict with the smallest effect it could have seen (NULL: unbounded, or the older threshold rule).
CREATE OR REPLACE VIEW v_verdict_mde AS
SELECT endpoint, campaign_id, experiment_id, technique, change, verdict,
       effect, effect_low, effect_high, mde, created_at
FROM experiments
WHERE verdict IN ('better', 'same', 'worse')
ORDER BY endpoint, campaign_id, created_at, experiment_id;

-- Per campaign: the median MDE of its verdicts with the range, the campaign's headline MDE.
CREATE OR REPLACE VIEW v_campaign_mde AS
SELECT endpoint, campaign_id,
       count(*) AS verdicts,
       count(mde) AS verdicts_with_mde,
       median(mde) AS median_mde,
       min(mde) AS min_mde,
       max(mde) AS max_mde,
       max(created_at) AS latest_at
FROM v_verdict_mde
GROUP BY endpoint, campaign_id
ORDER BY endpoint, latest_at, campaign_id;

-- Per endpoint, protocol and estimator: the verdicts' MDEs first (median and range over the endpoint's
-- verdicts, all protocols: an experiment row records none; the latest campaign's median beside), then the
-- pooled between-run sd of a paired difference, the noise its floors start from (an input, not an MDE).
CREATE OR REPLACE VIEW v_endpoint_noise AS
WITH noise AS (
    SELECT endpoint, protocol, estimator,
           count(*) AS sources,
           sum(df) AS df,
           CASE WHEN sum(df) > 0 THEN sqrt(sum(sum_sq) / sum(df)) END AS between_run_sd,
           max(created_at) AS latest_at
    FROM aa_evidence
    GROUP BY endpoint, protocol, estimator
), verdicts AS (
    SELECT endpoint,
           count(mde) AS verdicts,
           median(mde) AS verdict_mde_median,
           min(mde) AS verdict_mde_min,
           max(mde) AS verdict_mde_max
    FROM v_verdict_mde
    GROUP BY endpoint
), latest AS (
    SELECT endpoint, arg_max(campaign_id, latest_at) AS latest_campaign_id,
           arg_max(median_mde, latest_at) AS latest_campaign_median_mde
    FROM v_campaign_mde
    WHERE median_mde IS NOT NULL
    GROUP BY endpoint
)
SELECT n.endpoint, n.protocol, n.estimator,
       coalesce(v.verdicts, 0) AS verdicts,
       v.verdict_mde_median, v.verdict_mde_min, v.verdict_mde_max,
       l.latest_campaign_id, l.latest_campaign_median_mde,
       n.sources, n.df, n.between_run_sd, n.latest_at
FROM noise n
LEFT JOIN verdicts v ON v.endpoint = n.endpoint
LEFT JOIN latest l ON l.endpoint = n.endpoint;

-- Per endpoint: the verdicts' MDEs, typical and latest, with their whole range (best_mde alone flattered).
CREATE OR REPLACE VIEW v_endpoint_mde AS
SELECT endpoint,
       count(mde) AS interval_verdicts,
       arg_max(mde, created_at) AS latest_mde,
       median(mde) AS median_mde,
       min(mde) AS best_mde,
       max(created_at) AS latest_at,
       max(mde) AS worst_mde
FROM v_verdict_mde
WHERE mde IS NOT NULL
GROUP BY endpoint;
