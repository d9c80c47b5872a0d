package comfyassets

import (
	"time"

	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/storage"
)

// assetJSON is the contract's Asset.
type assetJSON struct {
	ID           string   `json:"id"`
	Hash         *string  `json:"hash"`
	SizeBytes    int64    `json:"size_bytes"`
	ContentType  string   `json:"content_type"`
	FilePath     *string  `json:"file_path,omitempty"`
	Tags         []string `json:"tags,omitempty"`
	CreatedNew   *bool    `json:"created_new,omitempty"`
	CreatedAt    string   `json:"created_at"`
	URL          string   `json:"url"`
	URLExpiresAt string   `json:"url_expires_at"`
	ExpiresAt    *string  `json:"expires_at"`
	JobID        *string  `json:"job_id,omitempty"`
}

// View renders an asset. createdNew is set only on create responses.
func View(a storage.Asset, links httpx.Links, createdNew *bool, now time.Time) any {
	v := assetJSON{
		ID:          a.ID,
		SizeBytes:   a.SizeBytes,
		ContentType: a.ContentType,
		Tags:        a.Tags,
		CreatedNew:  createdNew,
		CreatedAt:   httpx.Time(a.CreatedAt),
		ExpiresAt:   httpx.TimePtr(a.ExpiresAt),
	}
	url, expires := links.Content(a.ID, a.Object(), a.ContentType, now)
	v.URL, v.URLExpiresAt = url, httpx.Time(expires)
	if a.Hash != "" {
		h := a.Hash
		v.Hash = &h
	}
	if a.FilePath != "" {
		p := a.FilePath
		v.FilePath = &p
	}
	if a.JobID != "" {
		j := a.JobID
		v.JobID = &j
	}
	return v
}
