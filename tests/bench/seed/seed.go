// Package seed fills a migrated comfygate store with a realistic volume of
// jobs, outputs and assets for the scale benchmarks and the query-plan
// test: Postgres through COPY (Postgres), the embedded store through
// batched multi-row inserts in one transaction (SQLite). It writes rows as
// the stores would have left them, with every derived value consistent
// (blob reference counts, fair-share turns, the queue counts the triggers
// keep), so the stores read them like their own.
//
// It is a benchmark tool, not part of the product.
package seed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Plan describes what to write. Zero fields take the defaults noted.
type Plan struct {
	// Jobs is how many jobs to write.
	Jobs int
	// Accounts spreads the jobs over acct-0000 … acct-NNNN. Default 1000.
	Accounts int
	// BusyShare is the share of the jobs that belong to BusyAccount (the
	// rest go round the other accounts). Default 0.1.
	BusyShare float64
	// QueuedShare is the share of jobs left queued; of the others, one in
	// sixteen failed, one in sixteen canceled and the rest succeeded with
	// one output each. Default 0.1.
	QueuedShare float64
	// UploadEvery writes an uploaded asset for every UploadEvery-th job's
	// account; one in ten of them shares one of 100 common blobs. Default 5.
	UploadEvery int
	// Pool is the pool of every job. Default "builtin".
	Pool string
	// Now anchors the timestamps: jobs are created over the 20 hours before
	// it, oldest first, and expire 24 hours after they were created.
	// Default time.Now().
	Now time.Time
}

// BusyAccount holds Plan.BusyShare of the jobs.
const BusyAccount = "acct-0000"

// QuietAccount holds QuietJobs jobs (about; spread over the whole period)
// whatever the plan's size, so that its pages compare across sizes.
const (
	QuietAccount = "acct-quiet"
	QuietJobs    = 300
)

// Workflow is the graph every seeded job carries (a small txt2img graph,
// ~700 bytes, as ComfyUI's API format writes it).
const Workflow = `{"3":{"class_type":"KSampler","inputs":{"seed":156680208700286,"steps":20,"cfg":8,"sampler_name":"euler","scheduler":"normal","denoise":1,"model":["4",0],"positive":["6",0],"negative":["7",0],"latent_image":["5",0]}},"4":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"v1-5-pruned-emaonly.safetensors"}},"5":{"class_type":"EmptyLatentImage","inputs":{"width":512,"height":512,"batch_size":1}},"6":{"class_type":"CLIPTextEncode","inputs":{"text":"beautiful scenery nature glass bottle landscape, purple galaxy bottle","clip":["4",1]}},"7":{"class_type":"CLIPTextEncode","inputs":{"text":"text, watermark","clip":["4",1]}},"8":{"class_type":"VAEDecode","inputs":{"samples":["3",0],"vae":["4",2]}},"9":{"class_type":"SaveImage","inputs":{"filename_prefix":"ComfyUI","images":["8",0]}}}`

const (
	outputSize  = 412_337
	uploadSize  = 1_048_576
	commonBlobs = 100
)

func (p Plan) withDefaults() Plan {
	if p.Accounts <= 0 {
		p.Accounts = 1000
	}
	if p.BusyShare <= 0 {
		p.BusyShare = 0.1
	}
	if p.QueuedShare <= 0 {
		p.QueuedShare = 0.1
	}
	if p.UploadEvery <= 0 {
		p.UploadEvery = 5
	}
	if p.Pool == "" {
		p.Pool = "builtin"
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	p.Now = p.Now.UTC().Truncate(time.Microsecond)
	return p
}

// Job is one seeded job row; Output is set for a succeeded job.
type Job struct {
	ID, Account, Status string
	Created, Expires    time.Time
	Started, Completed  *time.Time
	Progress, Error     *string
	Attempt             int
	IdempotencyKey      *string
	Turn                int64
	Output              *Asset
}

// Asset is one seeded asset row (an output when JobID is set).
type Asset struct {
	ID, Account, Hash, ContentType, FilePath string
	Size                                     int64
	JobID                                    *string
	Created                                  time.Time
	Expires                                  *time.Time
}

// Blob is one seeded blob row.
type Blob struct {
	Hash string
	Size int64
	Refs int
}

// mix is splitmix64: a fixed pseudo-random value per row number, so a plan
// writes the same mix of rows every time.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hash(kind string, i int) string {
	s := sha256.Sum256([]byte(kind + strconv.Itoa(i)))
	return "blake3:" + hex.EncodeToString(s[:]) // the stores keep the canonical form
}

// gen produces a plan's rows. Every row is a function of its row number
// (IDs are name-based UUIDs in a namespace of the run's own), so the passes
// the writers make (blobs, then assets, then jobs, then outputs: the order
// the foreign keys need) agree; only turns depend on the jobs pass's order.
type gen struct {
	p         Plan
	ns        uuid.UUID
	turns     map[string]int64
	span      time.Duration
	busyEvery int
}

func newGen(p Plan) *gen {
	g := &gen{p: p.withDefaults(), ns: uuid.New(), turns: map[string]int64{}, span: 20 * time.Hour}
	g.busyEvery = max(1, int(1/g.p.BusyShare+0.5))
	return g
}

func (g *gen) id(kind string, i int) string {
	return uuid.NewSHA1(g.ns, []byte(kind+strconv.Itoa(i))).String()
}

// rowID is the id of row i of a table whose ids the product makes with
// storage.NewID (jobs, assets): a UUIDv7 of the row's creation time, the
// rest of its bits name-based as in id, so that a seeded store's indexes
// have the shape a store that ran for the span would have.
func (g *gen) rowID(kind string, i int, created time.Time) string {
	u := uuid.NewSHA1(g.ns, []byte(kind+strconv.Itoa(i)))
	ms := uint64(created.UnixMilli())
	for k := 0; k < 6; k++ {
		u[k] = byte(ms >> (40 - 8*k))
	}
	u[6] = 0x70 | u[6]&0x0f // version 7; NewSHA1 already set the variant
	return u.String()
}

func (g *gen) account(i int) string {
	if i%g.busyEvery == 0 {
		return BusyAccount
	}
	if i%max(2, g.p.Jobs/QuietJobs) == 3 {
		return QuietAccount
	}
	return fmt.Sprintf("acct-%04d", 1+int(mix(uint64(i)^0xacc)%uint64(g.p.Accounts-1)))
}

func (g *gen) created(i int) time.Time {
	step := g.span / time.Duration(max(g.p.Jobs, 1))
	return g.p.Now.Add(-g.span + time.Duration(i)*step).Truncate(time.Microsecond)
}

func (g *gen) status(i int) string {
	r := mix(uint64(i))
	switch {
	case float64(r%10000)/10000 < g.p.QueuedShare:
		return "queued"
	case r>>20%16 == 0:
		return "canceled"
	case r>>20%16 == 1:
		return "failed"
	}
	return "succeeded"
}

// job is row i; call it for i in order (turns).
func (g *gen) job(i int) Job {
	acct, c := g.account(i), g.created(i)
	j := Job{ID: g.rowID("job", i, c), Account: acct, Status: g.status(i), Created: c, Expires: c.Add(24 * time.Hour)}
	if mix(uint64(i)^0x1de)%10 < 3 {
		k := g.id("key", i)
		j.IdempotencyKey = &k
	}
	switch j.Status {
	case "queued":
		j.Turn = g.turns[acct]
		g.turns[acct]++
		return j
	case "canceled":
		done := c.Add(2 * time.Second)
		j.Completed = &done
		return j
	case "failed":
		e := `{"type":"execution_error","message":"CUDA out of memory","node_id":"3"}`
		j.Error = &e
	}
	start, done := c.Add(time.Second), c.Add(4*time.Second)
	j.Started, j.Completed, j.Attempt = &start, &done, 1
	prog := `{"node_id":"9","value":1,"max":1}`
	j.Progress = &prog
	if a, ok := g.output(i); ok {
		j.Output = &a
	}
	return j
}

// output is row i's output asset (ok false unless the job succeeded).
func (g *gen) output(i int) (Asset, bool) {
	if g.status(i) != "succeeded" {
		return Asset{}, false
	}
	c := g.created(i)
	jobID, expires := g.rowID("job", i, c), c.Add(24*time.Hour)
	return Asset{ID: g.rowID("out", i, c.Add(4*time.Second)), Account: g.account(i), Hash: hash("out", i), ContentType: "image/png",
		FilePath: fmt.Sprintf("ComfyUI_%05d_.png", i%100000), Size: outputSize, JobID: &jobID,
		Created: c.Add(4 * time.Second), Expires: &expires}, true
}

// upload is the uploaded asset that row i brings (ok false when none);
// common is set when its blob is one of the shared ones.
func (g *gen) upload(i int) (a Asset, common, ok bool) {
	if i%g.p.UploadEvery != 1 {
		return Asset{}, false, false
	}
	h := hash("up", i)
	if r := mix(uint64(i) ^ 0x5eed); r%10 == 0 {
		h, common = hash("common", int(r/10%commonBlobs)), true
	}
	return Asset{ID: g.rowID("up", i, g.created(i)), Account: g.account(i), Hash: h, ContentType: "image/png",
		FilePath: fmt.Sprintf("inputs/photo_%d.png", i), Size: uploadSize, Created: g.created(i)}, common, true
}

// blobs calls emit for every blob the plan's assets reference, with its
// reference count.
func (g *gen) blobs(emit func(Blob) error) error {
	common := map[string]int{}
	for i := range g.p.Jobs {
		if a, ok := g.output(i); ok {
			if err := emit(Blob{Hash: a.Hash, Size: a.Size, Refs: 1}); err != nil {
				return err
			}
		}
		if a, shared, ok := g.upload(i); ok {
			if shared {
				common[a.Hash]++
			} else if err := emit(Blob{Hash: a.Hash, Size: a.Size, Refs: 1}); err != nil {
				return err
			}
		}
	}
	for h, n := range common {
		if err := emit(Blob{Hash: h, Size: uploadSize, Refs: n}); err != nil {
			return err
		}
	}
	return nil
}

// assets calls emit for every output and uploaded asset.
func (g *gen) assets(emit func(Asset) error) error {
	for i := range g.p.Jobs {
		if a, ok := g.output(i); ok {
			if err := emit(a); err != nil {
				return err
			}
		}
		if a, _, ok := g.upload(i); ok {
			if err := emit(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stats is what a seeding wrote and how long it took.
type Stats struct {
	Jobs, Queued, Outputs, Uploads, Blobs int
	Took                                  time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%d jobs (%d queued), %d outputs, %d uploaded assets, %d blobs in %s",
		s.Jobs, s.Queued, s.Outputs, s.Uploads, s.Blobs, s.Took.Round(time.Millisecond))
}

// Upload names the account and file path of an uploaded asset a plan
// writes (its first), for benchmarks that need one; FindAssetByPath finds it.
func Upload(p Plan) (account, filePath string) {
	g := newGen(p)
	a, _, _ := g.upload(1)
	return a.Account, a.FilePath
}
