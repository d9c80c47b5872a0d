package comfyreal

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/comfyreal/realcomfy"
	"github.com/comfygate/comfygate/tests/gateway"
)

// intended are the differences between the front and ComfyUI 5b69cfe7
// that the side-by-side comparison finds and that are intended, by where
// they are (answer and field path, with indexes and node ids generalised),
// each with its reason. docs/comfyui.md lists the same. A difference not
// listed fails the test, and so does a listed one that is gone (the list
// stays true).
var intended = map[string]string{
	"ws executing data.display_node": "a field of newer ComfyUI (2024-08 on), which the front speaks: in every executing and executed",
	"ws executed data.display_node":  "a field of newer ComfyUI (2024-08 on), which the front speaks: in every executing and executed",
	"history meta":                   "a field of newer ComfyUI, which the front speaks: each output node's meta",
	"ws executing data.prompt_id": "the executing re-sent to a socket that connects mid-prompt names its prompt: " +
		"the front may run several prompts of one client id at once (ComfyUI runs one)",
	"ws executed data.output.images[].subfolder": "outputs are stored under their prompt's id, so that they never collide",
	"history outputs.images[].subfolder":         "outputs are stored under their prompt's id, so that they never collide",
	"queue queue_running[][0]": "the number is the prompt's creation time in ms: increasing, as ComfyUI's counter is, " +
		"and the same from every gateway process",
	"history prompt[0]": "the number is the prompt's creation time in ms: increasing, as ComfyUI's counter is, " +
		"and the same from every gateway process",
	"ws progress": "for nodes without a progress bar the front reports the nodes done of the nodes to run; " +
		"ComfyUI sends progress only from a node's progress bar",
	"ws execution_error data.exception_type":     excType,
	"history status.messages[][].exception_type": excType,
	"ws execution_error data.current_inputs":     currentInputs,
	"history status.messages[][].current_inputs": currentInputs,
	"view content-disposition": "inline; filename=… as RFC 6266 has it (a type, and quoting where the name needs it); " +
		"ComfyUI sends filename=\"…\" alone: clients read the same name from both",
}

const (
	excType = "exception_type is the job's error code (node_execution_error): a job's error " +
		"(the v2 contract's) keeps the node, its class, the message and the traceback, not Python's exception type"
	currentInputs = "current_inputs is empty: the gateway does not hold the values a node was called with " +
		"(and the worker's names the inputs staged for the prompt, not the client's)"
)

// TestFrontSideBySide: the same prompts sent to a real ComfyUI and to the
// gateway's ComfyUI-compatible front (in front of a pool of another
// server of the same ComfyUI), their /ws messages, /history, /view,
// /upload/image and /queue answers diffed field by field. Values that are
// the run's own (prompt ids, timestamps, the socket's sid) are compared
// by shape.
func TestFrontSideBySide(t *testing.T) {
	src := realcomfy.Require(t)
	servers := src.Start(t, 2)
	worker, direct := servers[0], servers[1]
	g := gateway.Start(t, gateway.NativeConfig(fmt.Sprintf(`storage embedded ./data
		pool gpu comfyui {
			worker %s {
				input_dir %q
			}
		}`, worker.URL, worker.InputDir), "gpu"), gateway.Options{})
	real := side{name: "ComfyUI", base: direct.URL}
	front := side{name: "front", base: g.URL, key: gateway.CreateAPIKey(t, g, "side")}
	d := &differ{}

	// /upload/image: a new name, the same name again with other bytes
	// (renamed), and with overwrite.
	img := gateway.GradientPNG(t, 32)
	other := gateway.GradientPNG(t, 24)
	d.compare("upload", "upload", real.upload(t, "side.png", img, false), front.upload(t, "side.png", img, false), nil)
	d.compare("upload", "upload again", real.upload(t, "side.png", other, false), front.upload(t, "side.png", other, false), nil)
	d.compare("upload", "upload overwrite", real.upload(t, "side.png", img, true), front.upload(t, "side.png", img, true), nil)
	// Bytes that are no image: LoadImage fails on them (an execution error).
	cut := []byte("these bytes are not an image")
	d.compare("upload", "upload cut", real.upload(t, "cut.png", cut, true), front.upload(t, "cut.png", cut, true), nil)

	prompts := []struct {
		name   string
		prompt map[string]any
	}{
		{"save", map[string]any{
			"1": gateway.Node("LoadImage", map[string]any{"image": "side.png"}),
			"2": gateway.Node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
			"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}, "filename_prefix": "side"}),
		}},
		// Node ids of its own: ComfyUI would take node 1 of the prompt
		// before from its cache (the front caches nothing).
		{"preview", map[string]any{
			"4": gateway.Node("LoadImage", map[string]any{"image": "side.png"}),
			"5": gateway.Node("ImageScale", map[string]any{"image": []any{"4", 0}, "upscale_method": "bilinear", "width": 48, "height": 48, "crop": "disabled"}),
			"6": gateway.Node("PreviewImage", map[string]any{"images": []any{"5", 0}}),
		}},
		{"error", map[string]any{
			"7": gateway.Node("LoadImage", map[string]any{"image": "cut.png"}),
			"8": gateway.Node("SaveImage", map[string]any{"images": []any{"7", 0}, "filename_prefix": "cut"}),
		}},
	}
	for i, p := range prompts {
		clientID := fmt.Sprintf("side-%d", i)
		runs := map[string]run{}
		for _, s := range []side{real, front} {
			ws := s.dial(t, clientID)
			ws.until(t, "the first status", 10*time.Second, 0, func(m map[string]any) bool { return m["type"] == "status" })
			id := s.queue(t, p.prompt, clientID)
			msgs := ws.until(t, "executing null", 2*time.Minute, 500*time.Millisecond, ended(id))
			h, _ := s.json(t, http.MethodGet, "/history/"+id, nil).(map[string]any)
			runs[s.name] = run{id: id, msgs: msgs, history: h[id]}
			ws.conn.CloseNow()
		}
		r, f := runs["ComfyUI"], runs["front"]
		d.messages(p.name, r, f)
		d.compare("history", "history "+p.name, r.history, f.history, []string{r.id, f.id})
		// /view of the output, by the history's file reference.
		rf, ff := firstFile(r.history), firstFile(f.history)
		if len(rf) == 0 && len(ff) == 0 {
			continue // no output (the error)
		}
		rs, rh, rb := real.call(t, http.MethodGet, "/view?"+rf.Encode(), "", nil)
		fs, fh, fb := front.call(t, http.MethodGet, "/view?"+ff.Encode(), "", nil)
		d.compare("view", "view "+p.name, viewOf(rs, rh), viewOf(fs, fh), []string{r.id, f.id})
		if rs == http.StatusOK && fs == http.StatusOK {
			sameImage(t, fb, rb)
		}
	}

	// /queue while a prompt runs (blurs of 512², each long enough that a
	// socket that connects in one finds it running), on both.
	slow := map[string]any{"1": gateway.Node("LoadImage", map[string]any{"image": "side.png"}),
		"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "bilinear", "width": 512, "height": 512, "crop": "disabled"})}
	prev := "2"
	for i := range 8 {
		id := fmt.Sprint(10 + i)
		slow[id] = gateway.Node("ImageBlur", map[string]any{"image": []any{prev, 0}, "blur_radius": 8, "sigma": 2.0})
		prev = id
	}
	slow["3"] = gateway.Node("SaveImage", map[string]any{"images": []any{prev, 0}, "filename_prefix": "slow"})
	queues, lates := map[string]any{}, map[string]run{}
	ids := map[string]string{}
	for _, s := range []side{real, front} {
		ws := s.dial(t, "side-queue")
		id := s.queue(t, slow, "side-queue")
		ids[s.name] = id
		ws.until(t, "executing of a blur", 2*time.Minute, 0, func(m map[string]any) bool {
			d, _ := m["data"].(map[string]any)
			return m["type"] == "executing" && d["node"] == "11"
		})
		queues[s.name] = s.json(t, http.MethodGet, "/queue", nil)
		// A socket of the same client id that connects now: the
		// running node's executing, then the rest of the prompt.
		late := s.dial(t, "side-queue")
		lates[s.name] = run{id: id, msgs: late.until(t, "executing null", 2*time.Minute, 500*time.Millisecond, ended(id))}
	}
	d.compare("queue", "queue", queues["ComfyUI"], queues["front"], []string{ids["ComfyUI"], ids["front"]})
	d.messages("late socket", lates["ComfyUI"], lates["front"])

	d.check(t)
}

// run is one prompt's messages and history entry on one side.
type run struct {
	id      string
	msgs    []map[string]any
	history any
}

// firstFile is the query of /view for the first file of the entry's
// outputs.
func firstFile(entry any) url.Values {
	e, _ := entry.(map[string]any)
	outs, _ := e["outputs"].(map[string]any)
	for _, node := range slices.Sorted(maps.Keys(outs)) {
		ui, _ := outs[node].(map[string]any)
		files, _ := ui["images"].([]any)
		if len(files) > 0 {
			f, _ := files[0].(map[string]any)
			q := url.Values{}
			for _, k := range []string{"filename", "subfolder", "type"} {
				q.Set(k, fmt.Sprint(f[k]))
			}
			return q
		}
	}
	return url.Values{}
}

// viewOf is what /view answers, beside the bytes (compared as images).
func viewOf(status int, h http.Header) any {
	return map[string]any{"status": status, "content-type": h.Get("Content-Type"), "content-disposition": h.Get("Content-Disposition")}
}

// differ collects the differences found, by generalised path.
type differ struct {
	found map[string][]string // path → the differences seen there
}

func (d *differ) add(path, what string) {
	if d.found == nil {
		d.found = map[string][]string{}
	}
	d.found[path] = append(d.found[path], what)
}

// compare diffs two JSON values field by field, after replacing each of
// ids (the prompt ids of the run, real's then front's) by a placeholder.
func (d *differ) compare(kind, what string, real, front any, ids []string) {
	rf, ff := flatten(normalise(real, ids), ""), flatten(normalise(front, ids), "")
	for _, k := range slices.Sorted(maps.Keys(merged(rf, ff))) {
		r, inR := rf[k]
		f, inF := ff[k]
		if inR && inF && r == f {
			continue
		}
		d.add(kind+" "+general(k), fmt.Sprintf("%s %s: ComfyUI %s, front %s", what, k, show(r, inR), show(f, inF)))
	}
}

// messages diffs two prompts' /ws messages: the sequences of types (the
// front's progress set apart, see intended), then each pair of messages
// field by field.
func (d *differ) messages(name string, r, f run) {
	rm, fm := seq(r.msgs, r.id), seq(f.msgs, f.id)
	var rp, fp []map[string]any
	rm, rp = split(rm)
	fm, fp = split(fm)
	if len(rp) != len(fp) {
		d.add("ws progress", fmt.Sprintf("%s: ComfyUI sent %d progress, the front %d", name, len(rp), len(fp)))
	}
	rt, ft := types(rm), types(fm)
	if !slices.Equal(rt, ft) {
		d.add("ws sequence", fmt.Sprintf("%s: ComfyUI %v, front %v", name, rt, ft))
		return
	}
	for i := range rm {
		typ := rt[i]
		d.compare("ws "+typ[:strings.IndexByte(typ+":", ':')], fmt.Sprintf("ws %s[%d] %s", name, i, typ), rm[i], fm[i], []string{r.id, f.id})
	}
}

// seq keeps the messages of the prompt id, the statuses and an executing
// that names no prompt (ComfyUI's to a socket that connects mid-prompt).
// A status whose queue is the one before it is left out: the front repeats the
// status every 5 s (a keepalive), and ComfyUI sends the same one when it
// queues the prompt and when it takes it.
func seq(msgs []map[string]any, id string) []map[string]any {
	var out []map[string]any
	var status any
	for _, m := range msgs {
		data, _ := m["data"].(map[string]any)
		_, named := data["prompt_id"]
		if m["type"] != "status" && data["prompt_id"] != id && (named || m["type"] != "executing") {
			continue
		}
		if m["type"] == "status" {
			if reflect.DeepEqual(status, data["status"]) {
				continue
			}
			status = data["status"]
		}
		out = append(out, m)
	}
	return out
}

func split(msgs []map[string]any) (rest, progress []map[string]any) {
	for _, m := range msgs {
		if m["type"] == "progress" {
			progress = append(progress, m)
		} else {
			rest = append(rest, m)
		}
	}
	return rest, progress
}

func types(msgs []map[string]any) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprint(m["type"])
		if data, _ := m["data"].(map[string]any); m["type"] == "executing" || m["type"] == "executed" {
			out[i] += fmt.Sprintf(":%v", data["node"])
		}
	}
	return out
}

// check fails for every difference not intended, and for every intended
// one no longer found.
func (d *differ) check(t *testing.T) {
	t.Helper()
	for _, path := range slices.Sorted(maps.Keys(d.found)) {
		reason, ok := intendedAt(path)
		for _, what := range d.found[path] {
			if ok {
				t.Logf("intended (%s): %s", reason, what)
			} else {
				t.Errorf("a difference: %s", what)
			}
		}
	}
	for _, path := range slices.Sorted(maps.Keys(intended)) {
		gone := true
		for found := range d.found {
			if found == path || strings.HasPrefix(found, path+".") {
				gone = false
			}
		}
		if gone {
			t.Errorf("the intended difference %q is gone: update the list (and docs/comfyui.md)", path)
		}
	}
}

// intendedAt is the reason of the intended difference at path (or under
// it).
func intendedAt(path string) (string, bool) {
	for p := path; ; {
		if reason, ok := intended[p]; ok {
			return reason, true
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return "", false
		}
		p = p[:i]
	}
}

// tempName is the random part ComfyUI puts in a PreviewImage file's name.
var tempName = regexp.MustCompile(`_temp_[a-z]{5}_`)

// normalise replaces the run's own values: the prompt ids, timestamps, a
// socket's sid and the random part of a preview's file name.
func normalise(v any, ids []string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch k {
			case "timestamp":
				out[k] = "<timestamp>"
			case "sid":
				out[k] = "<sid>"
			default:
				out[k] = normalise(e, ids)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalise(e, ids)
		}
		return out
	case string:
		for _, id := range ids {
			x = strings.ReplaceAll(x, id, "<prompt_id>")
		}
		return tempName.ReplaceAllString(x, "_temp_<random>_")
	}
	return v
}

// flatten maps each leaf of v (empty maps and lists included) to its JSON,
// by path.
func flatten(v any, path string) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
		}
		for k, e := range x {
			maps.Copy(out, flatten(e, join(path, k)))
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, e := range x {
			maps.Copy(out, flatten(e, fmt.Sprintf("%s[%d]", path, i)))
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
	return out
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func show(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return v
}

// general is a path with node ids left out and list indexes as [], so
// that a difference is named once wherever it occurs
// (outputs.3.images[0].subfolder → outputs.images[].subfolder), but for
// the place in ComfyUI's prompt tuple, which tells its fields apart
// (prompt[0], queue_running[][0]).
func general(path string) string {
	var parts []string
	for _, p := range strings.Split(path, ".") {
		name, idx, _ := strings.Cut(p, "[")
		if name == "" && idx == "" || strings.Trim(name, "0123456789") == "" && idx == "" {
			continue
		}
		if idx != "" {
			n := strings.Count(idx, "[") + 1
			switch name {
			case "prompt":
				name = "prompt[" + idx
			case "queue_running", "queue_pending":
				last := idx[strings.LastIndex("["+idx, "["):]
				name += strings.Repeat("[]", n-1) + "[" + last
			default:
				name += strings.Repeat("[]", n)
			}
		}
		parts = append(parts, name)
	}
	return strings.Join(parts, ".")
}
