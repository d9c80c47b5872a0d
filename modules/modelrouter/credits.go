package modelrouter

import (
	"context"
	"time"

	"github.com/comfygate/comfygate/modules/comfygate"
)

// appCredits reaches the app's credit ledger lazily (the app opens its
// backends on first use). It is calls.Credits: the router's require_credits
// draws from the same per-account ledger as priced jobs, the workspace of
// a call being the account of the same id.
type appCredits struct{ app *comfygate.App }

func (c appCredits) ReserveCallCredits(ctx context.Context, account, callID string, amount int64) error {
	if err := c.app.Ready(); err != nil {
		return err
	}
	return c.app.Store().ReserveCallCredits(ctx, account, callID, amount)
}

func (c appCredits) SettleCallCredits(ctx context.Context, callID string, charged int64) (bool, error) {
	if err := c.app.Ready(); err != nil {
		return false, err
	}
	return c.app.Store().SettleCallCredits(ctx, callID, charged)
}

func (c appCredits) SettleStaleCallCredits(ctx context.Context, before time.Time) (int, error) {
	if err := c.app.Ready(); err != nil {
		return 0, err
	}
	return c.app.Store().SettleStaleCallCredits(ctx, before)
}
