package comfygate

import (
	"context"

	"go.uber.org/zap"
)

// orphanPage is how many published objects one maintenance pass checks for
// a record: the walk covers a store of n objects every n/orphanPage passes,
// at one listing request and one query per pass.
const orphanPage = 1000

// sweepOrphans checks the next page of published objects and removes those
// no blob record names (assets.Service.SweepOrphans). The walk resumes
// after the last object it checked, and starts over once it reaches the end.
func (a *App) sweepOrphans(ctx context.Context) {
	next, n, err := a.Assets().SweepOrphans(ctx, a.orphanCursor, orphanPage)
	a.orphanCursor = next
	if err != nil && ctx.Err() == nil {
		a.logger.Error("sweeping orphan blobs", zap.Error(err))
	}
	if n > 0 {
		a.logger.Info("removed blobs no record names", zap.Int("count", n))
	}
}
