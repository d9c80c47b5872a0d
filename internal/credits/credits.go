// Package credits is the operator's side of the credit ledger: what a
// pool's price reserves for a job, and the parsing and rendering behind
// `comfygate credits` (grant, balance, ledger, usage). The ledger itself is
// storage.CreditStore; this package knows nothing of Caddy.
package credits

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// Price is a pool's job price in whole credits.
type Price struct {
	PerJob    int64
	PerSecond int64
	// MaxCharge, when positive, is the most a job is charged and what it
	// reserves; otherwise it reserves PerJob + PerSecond × the running
	// bound in whole seconds (rounded up).
	MaxCharge int64
}

// JobPrice is the storage price of a job that runs at most runningBound:
// its per-job and per-second figures and the reserve. It refuses figures
// that are negative, a price that charges nothing, and a reserve beyond
// storage.MaxCredits or below the per-job charge.
func (p Price) JobPrice(runningBound time.Duration) (storage.JobPrice, error) {
	switch {
	case p.PerJob < 0 || p.PerSecond < 0 || p.MaxCharge < 0:
		return storage.JobPrice{}, errors.New("credits: prices must not be negative")
	case p.PerJob == 0 && p.PerSecond == 0:
		return storage.JobPrice{}, errors.New("credits: a price needs per_job or per_second")
	case p.PerJob > storage.MaxCredits || p.PerSecond > storage.MaxCredits || p.MaxCharge > storage.MaxCredits:
		return storage.JobPrice{}, fmt.Errorf("credits: prices must be at most %d", storage.MaxCredits)
	}
	reserve := p.MaxCharge
	if reserve == 0 {
		seconds := int64((runningBound + time.Second - 1) / time.Second)
		if seconds > 0 && p.PerSecond > (storage.MaxCredits-p.PerJob)/seconds {
			return storage.JobPrice{}, errors.New("credits: per_second × running_bound is too large; set max_charge")
		}
		reserve = p.PerJob + p.PerSecond*seconds
	}
	if reserve < p.PerJob {
		return storage.JobPrice{}, fmt.Errorf("credits: max_charge %d is below per_job %d", reserve, p.PerJob)
	}
	return storage.JobPrice{PerJob: p.PerJob, PerSecond: p.PerSecond, Reserve: reserve}, nil
}

// ParseAmount reads a whole, non-zero number of credits (negative removes).
func ParseAmount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 || n > storage.MaxCredits || n < -storage.MaxCredits {
		return 0, fmt.Errorf("amount %q must be a non-zero whole number of credits within ±%d", s, storage.MaxCredits)
	}
	return n, nil
}

// ParseSince reads a --since value relative to now: an RFC 3339 time, a
// date (YYYY-MM-DD, UTC), or a duration meaning that long ago ("24h").
// Empty means the beginning.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time, a date (2006-01-02) or a duration (24h)", s)
}

// entryJSON is one ledger entry as `credits ledger --json` prints it.
type entryJSON struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"`
	Kind    string `json:"kind"`
	Amount  int64  `json:"amount"`
	Charged int64  `json:"charged"`
	RunMS   int64  `json:"run_ms"`
	JobID   string `json:"job_id,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	Note    string `json:"note,omitempty"`
	Balance int64  `json:"balance"`
}

// WriteLedger prints entries oldest first with the running balance after
// each: a table, or with asJSON one JSON object per line. opening is the
// balance before the first entry (0 when the ledger is read from its
// start).
func WriteLedger(w io.Writer, entries []storage.CreditEntry, opening int64, asJSON bool) error {
	bal := opening
	if asJSON {
		enc := json.NewEncoder(w)
		for _, e := range entries {
			bal += e.Amount
			if err := enc.Encode(entryJSON{Seq: e.Seq, Time: e.CreatedAt.UTC().Format(time.RFC3339Nano), Kind: e.Kind,
				Amount: e.Amount, Charged: e.Charged, RunMS: e.RunMS, JobID: e.JobID, CallID: e.CallID,
				Note: e.Note, Balance: bal}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tAMOUNT\tCHARGED\tRUN_MS\tBALANCE\tFOR\tNOTE\t")
	for _, e := range entries {
		bal += e.Amount
		ref := "-"
		switch {
		case e.JobID != "":
			ref = "job " + e.JobID
		case e.CallID != "":
			ref = "call " + e.CallID
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%+d\t%d\t%d\t%d\t%s\t%s\t\n", e.Seq, e.CreatedAt.UTC().Format(time.RFC3339),
			e.Kind, e.Amount, e.Charged, e.RunMS, bal, ref, strings.ReplaceAll(e.Note, "\t", " "))
	}
	return tw.Flush()
}

// UsageColumns are the columns of `credits usage`.
var UsageColumns = []string{"account", "jobs", "execution_seconds", "router_calls", "credits"}

// WriteUsage prints one row per account: a table, or with asCSV a CSV with
// a header row. Execution time is in seconds with millisecond precision.
func WriteUsage(w io.Writer, usage []storage.CreditUsage, asCSV bool) error {
	rows := make([][]string, 0, len(usage))
	for _, u := range usage {
		rows = append(rows, []string{u.AccountID, strconv.FormatInt(u.Jobs, 10),
			strconv.FormatFloat(float64(u.ExecutionMS)/1000, 'f', 3, 64),
			strconv.FormatInt(u.RouterCalls, 10), strconv.FormatInt(u.Credits, 10)})
	}
	if asCSV {
		cw := csv.NewWriter(w)
		if err := cw.Write(UsageColumns); err != nil {
			return err
		}
		if err := cw.WriteAll(rows); err != nil {
			return err
		}
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(UsageColumns, "\t")))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
