package comfyui

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// stagingFolder is the folder under a worker's input directory that holds
// one subfolder of staged inputs per job.
const stagingFolder = "comfygate"

// errUnsafeInputPath refuses a removal that could reach outside the
// staging folder of a worker's input directory.
var errUnsafeInputPath = errors.New("comfyui: refusing to remove staged inputs")

// stagingSubfolder is the subfolder (relative to the worker's input
// directory, slash-separated as ComfyUI's upload form wants) that holds a
// job's staged inputs.
func stagingSubfolder(jobID string) string { return stagingFolder + "/" + jobID }

// removeStagedInputs deletes <inputDir>/comfygate/<jobID> and everything in
// it. The job id must be a canonical UUID before it is joined to a path, and
// the removal goes through an os.Root opened on inputDir, so neither a
// crafted id nor a symlink planted under inputDir can make it delete
// anything outside inputDir. A job that staged nothing is not an error.
func removeStagedInputs(inputDir, jobID string) error {
	if u, err := uuid.Parse(jobID); err != nil || u.String() != jobID {
		return fmt.Errorf("%w: job id %q is not a canonical UUID", errUnsafeInputPath, jobID)
	}
	root, err := os.OpenRoot(inputDir)
	if err != nil {
		return fmt.Errorf("opening the worker's input directory: %w", err)
	}
	defer root.Close()
	if err := root.RemoveAll(stagingSubfolder(jobID)); err != nil {
		return fmt.Errorf("removing %s: %w", stagingSubfolder(jobID), err)
	}
	return nil
}

// removeStagedInputs removes this attempt's job subfolder from the worker's
// input directory when the operator gave the gateway that directory. It runs
// when the attempt ends, whatever the outcome, before Execute returns, so a
// job is never reported finished with its inputs still on disk. A failure is
// logged and not retried: the worst case is the old behaviour (inputs stay).
func (a *attempt) removeStagedInputs() {
	dir := a.w.cfg.InputDir
	if dir == "" {
		return
	}
	if err := removeStagedInputs(dir, a.run.Job.ID); err != nil {
		a.log.Warn("removing the job's staged inputs", zap.String("input_dir", dir), zap.Error(err))
		return
	}
	a.log.Debug("removed the job's staged inputs", zap.String("input_dir", dir))
}

// resolveInputDirs makes the workers' input directories absolute (so that
// they do not depend on a later change of working directory) and warns
// about one that is not a directory now: removals would fail until it is.
func resolveInputDirs(workers []WorkerConfig, logger *zap.Logger) error {
	for i := range workers {
		w := &workers[i]
		if w.InputDir == "" {
			continue
		}
		abs, err := filepath.Abs(w.InputDir)
		if err != nil {
			return fmt.Errorf("comfyui: worker %q: input_dir: %w", w.URL, err)
		}
		w.InputDir = abs
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			logger.Warn("a worker's input_dir is not a reachable directory; its staged inputs cannot be removed until it is",
				zap.Int("worker_index", i), zap.String("input_dir", abs))
		}
	}
	return nil
}
