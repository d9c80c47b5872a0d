package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// runningWorker waits for a worker running a job and returns its index.
func runningWorker(ctx context.Context, s *Stack) (int, error) {
	for ctx.Err() == nil {
		for i, p := range s.Peers {
			if p.Running() != "" {
				return i, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no worker was running a job during the fault window")
}

// TestComfyWorkerShutdown (issue 29, acceptance 3): the worker running a
// job gets a SIGTERM and stops gracefully (its socket closed with 1001
// going away, new prompts refused, its queue finished, then its port
// closed for good): it finishes what it runs and takes nothing new; the
// other worker takes the rest of the workload.
func TestComfyWorkerShutdown(t *testing.T) {
	sideBySide(t)
	d := pick(6*time.Second, 30*time.Second)
	Run(t, scenario("comfyui worker SIGTERM", "the ComfyUI worker running a job stops gracefully (1001, finishes its queue, exits) and stays down", d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			i, err := runningWorker(ctx, s)
			if err != nil {
				return err
			}
			s.Peers[i].Shutdown(500 * time.Millisecond)
			return hold(ctx)
		}), StackOptions{})
}

// TestComfyWorkerRemoved (issue 29, acceptance 3): the worker running a
// job is removed through the admin API mid-job (it drains), and added back
// when the fault ends.
func TestComfyWorkerRemoved(t *testing.T) {
	sideBySide(t)
	d := pick(6*time.Second, 30*time.Second)
	var removed string
	sc := scenario("comfyui worker removed", "the ComfyUI worker running a job removed through the admin API (drain), added back after "+d.String(), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			i, err := runningWorker(ctx, s)
			if err != nil {
				return err
			}
			removed = "http://" + s.Faults.Proxy([]string{Comfy0, Comfy1}[i]).Addr
			if err := adminDo(s, http.MethodDelete, "/comfygate/workers/gpu?url="+url.QueryEscape(removed), ""); err != nil {
				return err
			}
			return hold(ctx)
		})
	sc.Heal = func(t *testing.T, s *Stack) error {
		if removed == "" {
			return nil
		}
		return adminDo(s, http.MethodPost, "/comfygate/workers/gpu", `{"url": "`+removed+`"}`)
	}
	Run(t, sc, StackOptions{Admin: true})
}

func adminDo(s *Stack, method, path, body string) error {
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", s.AdminPort, path), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
	}
	return nil
}

// TestComfyWorkerLeavesDNS (issue 29, acceptance 3): the pool takes its
// workers from DNS; the worker running a job leaves the answer mid-job (it
// drains) and comes back when the fault ends.
func TestComfyWorkerLeavesDNS(t *testing.T) {
	sideBySide(t)
	d := pick(6*time.Second, 30*time.Second)
	sc := scenario("comfyui worker leaves DNS", "the ComfyUI worker running a job leaves the SRV answer (drain), back after "+d.String(), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			i, err := runningWorker(ctx, s)
			if err != nil {
				return err
			}
			s.DNS.Set(portOf(t, s.Faults.Proxy([]string{Comfy0, Comfy1}[1-i]).Addr))
			return hold(ctx)
		})
	sc.Heal = func(t *testing.T, s *Stack) error {
		s.DNS.Set(portOf(t, s.Faults.Proxy(Comfy0).Addr), portOf(t, s.Faults.Proxy(Comfy1).Addr))
		return nil
	}
	Run(t, sc, StackOptions{DNS: true})
}
