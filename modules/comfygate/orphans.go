package comfygate

import (
	"context"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/storage/blob"
)

// orphanPage is how many published objects one maintenance pass checks for
// a record: the walk covers a store of n objects every n/orphanPage passes,
// at one listing request and one query per pass.
const orphanPage = 1000

// sweepOrphans checks the next page of published objects and removes those
// no blob record names: bytes a create published inside a transaction that
// then failed (the database went away before the commit). The walk resumes
// after the last object it checked, and starts over once it reaches the end.
func (a *App) sweepOrphans(ctx context.Context) {
	hashes, err := a.res.blobs.List(ctx, a.orphanCursor, orphanPage)
	if err != nil {
		if ctx.Err() == nil {
			a.logger.Error("listing blobs for the orphan sweep", zap.Error(err))
		}
		return
	}
	if len(hashes) < orphanPage {
		a.orphanCursor = ""
	} else {
		a.orphanCursor = hashes[len(hashes)-1]
	}
	n, err := a.res.store.RemoveOrphanBlobs(ctx, hashes, blob.RemoveFunc(ctx, a.res.blobs))
	if err != nil && ctx.Err() == nil {
		a.logger.Error("removing orphan blobs", zap.Error(err))
	}
	if n > 0 {
		a.logger.Info("removed blobs no record names", zap.Int("count", n))
	}
}
