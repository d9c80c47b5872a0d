package comfyui

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestRemoveStagedInputsGuards checks the guards of removeStagedInputs
// directly: ids that are not canonical UUIDs are refused before any path is
// built, symlinks cannot carry the removal outside the input directory, and
// a legitimate removal takes exactly the job's folder.
func TestRemoveStagedInputsGuards(t *testing.T) {
	t.Parallel()
	job := uuid.NewString()
	write := func(t *testing.T, p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	symlink := func(t *testing.T, target, link string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		jobID string
		// setup builds the layout under base (input dir base/input) and
		// returns the files that must survive and those that must go.
		setup   func(t *testing.T, base string) (keep, gone []string)
		wantErr bool
		// refused: the error must be errUnsafeInputPath (the id was refused).
		refused bool
	}{
		{
			name: "removes only the job's folder", jobID: job,
			setup: func(t *testing.T, base string) ([]string, []string) {
				in := filepath.Join(base, "input")
				return []string{write(t, filepath.Join(in, "comfygate", uuid.NewString(), "a.png")), write(t, filepath.Join(in, "b.png"))},
					[]string{write(t, filepath.Join(in, "comfygate", job, "sub", "c.png"))}
			},
		},
		{
			name: "nothing staged", jobID: job,
			setup: func(t *testing.T, base string) ([]string, []string) {
				return []string{write(t, filepath.Join(base, "input", "b.png"))}, nil
			},
		},
		{name: "dot-dot id", refused: true, jobID: "../../victim", wantErr: true, setup: victimBeside},
		{name: "parent id", refused: true, jobID: "..", wantErr: true, setup: victimBeside},
		{name: "empty id", refused: true, jobID: "", wantErr: true, setup: victimBeside},
		{name: "uppercase uuid", refused: true, jobID: strings.ToUpper(job), wantErr: true, setup: victimBeside},
		{name: "braced uuid", refused: true, jobID: "{" + job + "}", wantErr: true, setup: victimBeside},
		{name: "urn uuid", refused: true, jobID: "urn:uuid:" + job, wantErr: true, setup: victimBeside},
		{
			name: "staging folder is a symlink out of the input dir", jobID: job, wantErr: true,
			setup: func(t *testing.T, base string) ([]string, []string) {
				outside := filepath.Join(base, "outside")
				keep := write(t, filepath.Join(outside, job, "precious.txt"))
				symlink(t, outside, filepath.Join(base, "input", "comfygate"))
				return []string{keep}, nil
			},
		},
		{
			name: "job folder is a symlink out of the input dir", jobID: job,
			setup: func(t *testing.T, base string) ([]string, []string) {
				outside := filepath.Join(base, "outside")
				keep := write(t, filepath.Join(outside, "precious.txt"))
				link := filepath.Join(base, "input", "comfygate", job)
				symlink(t, outside, link)
				// The link itself goes; what it points at stays.
				return []string{keep}, []string{link}
			},
		},
		{
			name: "input dir missing", jobID: job, wantErr: true,
			setup: func(t *testing.T, base string) ([]string, []string) { return nil, nil },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			keep, gone := tc.setup(t, base)
			err := removeStagedInputs(filepath.Join(base, "input"), tc.jobID)
			if (err != nil) != tc.wantErr {
				t.Fatalf("removeStagedInputs(%q) = %v, want error %v", tc.jobID, err, tc.wantErr)
			}
			if tc.refused && !errors.Is(err, errUnsafeInputPath) {
				t.Errorf("error %v does not say the removal was refused", err)
			}
			for _, p := range keep {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("%s was removed: %v", p, err)
				}
			}
			for _, p := range gone {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still exists (%v)", p, err)
				}
			}
		})
	}
}

// victimBeside lays out base/input/comfygate and base/victim/precious.txt,
// and base/input/keep.png, which a naive join of a crafted id would reach.
func victimBeside(t *testing.T, base string) (keep, gone []string) {
	t.Helper()
	var files []string
	for _, rel := range []string{"victim/precious.txt", "input/keep.png", "input/comfygate/other/x.png"} {
		p := filepath.Join(base, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return files, nil
}
