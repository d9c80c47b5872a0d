package jobs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
)

// List paging bounds.
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

var knownStatuses = []string{storage.JobQueued, storage.JobRunning, storage.JobSucceeded,
	storage.JobCanceling, storage.JobCanceled, storage.JobFailed, storage.JobExpired}

// ParseListQuery reads a job list's query string: status (a comma-separated
// list), limit (1..MaxListLimit, default DefaultListLimit) and cursor (one
// EncodeCursor issued). Anything else in it is ignored.
func ParseListQuery(rawQuery string) (storage.JobQuery, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return storage.JobQuery{}, apierr.InvalidRequest("the query string is malformed")
	}
	query := storage.JobQuery{Limit: DefaultListLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return storage.JobQuery{}, apierr.InvalidRequest(fmt.Sprintf("limit must be an integer from 1 to %d", MaxListLimit))
		}
		query.Limit = n
	}
	if v := q.Get("status"); v != "" {
		for _, s := range strings.Split(v, ",") {
			if !slices.Contains(knownStatuses, s) {
				return storage.JobQuery{}, apierr.InvalidRequest(fmt.Sprintf("unknown status %q", s))
			}
			query.Statuses = append(query.Statuses, s)
		}
	}
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			return storage.JobQuery{}, apierr.InvalidRequest("cursor is not one this server issued")
		}
		query.Before = &c
	}
	return query, nil
}

// EncodeCursor is the opaque cursor of a list position.
func EncodeCursor(c storage.JobCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID))
}

func decodeCursor(s string) (storage.JobCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return storage.JobCursor{}, err
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return storage.JobCursor{}, errors.New("malformed cursor")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return storage.JobCursor{}, err
	}
	return storage.JobCursor{CreatedAt: t, ID: id}, nil
}
