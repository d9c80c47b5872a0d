package postgres

import (
	"context"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.ScaleStore = (*Store)(nil)

// PoolScales implements storage.ScaleStore.
func (s *Store) PoolScales(ctx context.Context) (map[string]storage.PoolScale, error) {
	rows, err := s.pool.Query(ctx, `SELECT pool, demand_at, demand_since, cold_start_ms, peak, peak_at FROM pool_scale`)
	if err != nil {
		return nil, mapErr("read pool scale", err)
	}
	defer rows.Close()
	out := map[string]storage.PoolScale{}
	for rows.Next() {
		var pool string
		var demandAt, since, cold, peakAt int64
		var peak int
		if err := rows.Scan(&pool, &demandAt, &since, &cold, &peak, &peakAt); err != nil {
			return nil, mapErr("read pool scale", err)
		}
		out[pool] = storage.PoolScale{DemandAt: storage.FromUnixMilli(demandAt), DemandSince: storage.FromUnixMilli(since),
			ColdStart: time.Duration(cold) * time.Millisecond, Peak: peak, PeakAt: storage.FromUnixMilli(peakAt)}
	}
	return out, mapErr("read pool scale", rows.Err())
}

// RecordDemand implements storage.ScaleStore.
func (s *Store) RecordDemand(ctx context.Context, pool string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO pool_scale (pool, demand_at, demand_since) VALUES ($1, $2, $2)
		ON CONFLICT (pool) DO UPDATE SET demand_at = GREATEST(pool_scale.demand_at, EXCLUDED.demand_at),
			demand_since = CASE WHEN pool_scale.demand_since = 0 THEN EXCLUDED.demand_since ELSE pool_scale.demand_since END`,
		pool, storage.UnixMilli(at))
	return mapErr("record demand", err)
}

// DemandMet implements storage.ScaleStore.
func (s *Store) DemandMet(ctx context.Context, pool string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE pool_scale SET cold_start_ms = GREATEST($2 - demand_since, 0), demand_since = 0
		WHERE pool = $1 AND demand_since <> 0`, pool, storage.UnixMilli(at))
	return mapErr("record demand met", err)
}

// SetPeak implements storage.ScaleStore.
func (s *Store) SetPeak(ctx context.Context, pool string, old storage.PoolScale, peak int, at time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO pool_scale AS p (pool, peak, peak_at) VALUES ($1, $2, $3)
		ON CONFLICT (pool) DO UPDATE SET peak = EXCLUDED.peak, peak_at = EXCLUDED.peak_at
		WHERE p.peak = $4 AND p.peak_at = $5`,
		pool, peak, storage.UnixMilli(at), old.Peak, storage.UnixMilli(old.PeakAt))
	if err != nil {
		return false, mapErr("set scale peak", err)
	}
	return tag.RowsAffected() == 1, nil
}

// JobTimes implements storage.ScaleStore: the newest jobs read backwards
// on jobs_created, their succeeded ones averaged per pool.
func (s *Store) JobTimes(ctx context.Context, recent int) (map[string]storage.JobTimes, error) {
	rows, err := s.pool.Query(ctx, `SELECT pool, count(*), avg(extract(epoch FROM completed_at - started_at))::float8
		FROM (SELECT pool, status, started_at, completed_at FROM jobs ORDER BY created_at DESC, id DESC LIMIT $1) AS r
		WHERE status = 'succeeded' AND started_at IS NOT NULL AND completed_at >= started_at
		GROUP BY pool`, recent)
	if err != nil {
		return nil, mapErr("read job times", err)
	}
	defer rows.Close()
	out := map[string]storage.JobTimes{}
	for rows.Next() {
		var pool string
		var n int
		var mean float64
		if err := rows.Scan(&pool, &n, &mean); err != nil {
			return nil, mapErr("read job times", err)
		}
		out[pool] = storage.JobTimes{Samples: n, Mean: time.Duration(mean * float64(time.Second))}
	}
	return out, mapErr("read job times", rows.Err())
}
