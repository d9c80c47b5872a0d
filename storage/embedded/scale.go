package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.ScaleStore = (*Store)(nil)

// PoolScales implements storage.ScaleStore.
func (s *Store) PoolScales(ctx context.Context) (map[string]storage.PoolScale, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT pool, demand_at, demand_since, cold_start_ms, peak, peak_at FROM pool_scale`)
	if err != nil {
		return nil, fmt.Errorf("embedded: read pool scale: %w", err)
	}
	defer rows.Close()
	out := map[string]storage.PoolScale{}
	for rows.Next() {
		var pool string
		var demandAt, since, cold, peakAt int64
		var peak int
		if err := rows.Scan(&pool, &demandAt, &since, &cold, &peak, &peakAt); err != nil {
			return nil, fmt.Errorf("embedded: read pool scale: %w", err)
		}
		out[pool] = storage.PoolScale{DemandAt: storage.FromUnixMilli(demandAt), DemandSince: storage.FromUnixMilli(since),
			ColdStart: time.Duration(cold) * time.Millisecond, Peak: peak, PeakAt: storage.FromUnixMilli(peakAt)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: read pool scale: %w", err)
	}
	return out, nil
}

// RecordDemand implements storage.ScaleStore.
func (s *Store) RecordDemand(ctx context.Context, pool string, at time.Time) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO pool_scale (pool, demand_at, demand_since) VALUES (?1, ?2, ?2)
		ON CONFLICT (pool) DO UPDATE SET demand_at = max(demand_at, excluded.demand_at),
			demand_since = CASE WHEN demand_since = 0 THEN excluded.demand_since ELSE demand_since END`,
		pool, storage.UnixMilli(at))
	if err != nil {
		return fmt.Errorf("embedded: record demand: %w", err)
	}
	return nil
}

// DemandMet implements storage.ScaleStore.
func (s *Store) DemandMet(ctx context.Context, pool string, at time.Time) error {
	_, err := s.write.ExecContext(ctx, `UPDATE pool_scale SET cold_start_ms = max(?2 - demand_since, 0), demand_since = 0
		WHERE pool = ?1 AND demand_since <> 0`, pool, storage.UnixMilli(at))
	if err != nil {
		return fmt.Errorf("embedded: record demand met: %w", err)
	}
	return nil
}

// SetPeak implements storage.ScaleStore.
func (s *Store) SetPeak(ctx context.Context, pool string, old storage.PoolScale, peak int, at time.Time) (bool, error) {
	res, err := s.write.ExecContext(ctx, `INSERT INTO pool_scale (pool, peak, peak_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (pool) DO UPDATE SET peak = excluded.peak, peak_at = excluded.peak_at
		WHERE peak = ?4 AND peak_at = ?5`,
		pool, peak, storage.UnixMilli(at), old.Peak, storage.UnixMilli(old.PeakAt))
	if err != nil {
		return false, fmt.Errorf("embedded: set scale peak: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// JobTimes implements storage.ScaleStore: the newest jobs read backwards
// on jobs_created, their succeeded ones averaged per pool (the stored
// text times read by julianday).
func (s *Store) JobTimes(ctx context.Context, recent int) (map[string]storage.JobTimes, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT pool, count(*), avg((julianday(completed_at) - julianday(started_at)) * 86400.0)
		FROM (SELECT pool, status, started_at, completed_at FROM jobs ORDER BY created_at DESC, id DESC LIMIT ?1)
		WHERE status = 'succeeded' AND started_at IS NOT NULL AND completed_at >= started_at
		GROUP BY pool`, recent)
	if err != nil {
		return nil, fmt.Errorf("embedded: read job times: %w", err)
	}
	defer rows.Close()
	out := map[string]storage.JobTimes{}
	for rows.Next() {
		var pool string
		var n int
		var mean float64
		if err := rows.Scan(&pool, &n, &mean); err != nil {
			return nil, fmt.Errorf("embedded: read job times: %w", err)
		}
		out[pool] = storage.JobTimes{Samples: n, Mean: time.Duration(mean * float64(time.Second))}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: read job times: %w", err)
	}
	return out, nil
}
