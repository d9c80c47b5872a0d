package workflow

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
)

// AssetType is the `__type` of the typed asset reference a client may put
// where a file name would go.
const AssetType = "core/ASSET"

// AssetRef is one place in a workflow that refers, or may refer, to one of
// the caller's assets.
type AssetRef struct {
	Node  string
	Input string
	// AssetID is set for a `core/ASSET` object; its `info.id` is
	// authoritative. Hash and FilePath are the object's optional hints.
	AssetID  string
	Hash     string
	FilePath string
	// FileName is set instead for a plain string on a combo input: a
	// candidate to match against the caller's assets' file_path. It is not
	// necessarily an asset (for example "bilinear" on ImageScale).
	FileName string
	// Upload is true when the input is an upload picker (LoadImage.image),
	// where an unmatched, unlisted name is best reported as missing_asset.
	Upload bool
}

// IsObject reports whether the reference is a `core/ASSET` object (rather
// than a file-name candidate).
func (r AssetRef) IsObject() bool { return r.AssetID != "" }

// AssetRefs lists every `core/ASSET` object among the input values and every
// string value of a combo input (per cat; nodes of unknown classes are
// skipped). A malformed `core/ASSET` object (no info, empty or non-string
// info.id) is 422 missing_asset naming each one.
//
// Intended flow for a submit handler:
//  1. refs, err := AssetRefs(g, cat)
//  2. look each ref up among the caller's assets: an object whose id is not
//     the caller's → missing_asset; a FileName that matches a file_path →
//     resolved; a FileName that matches nothing is left to Validate's combo
//     check (or, when ref.Upload and !spec.HasChoice, missing_asset).
//  3. Validate(g, cat, WithResolvedInputs(resolved)) — resolved inputs skip
//     the type and combo checks because the caller vouches for them.
//  4. stage the assets and SetInput the staged names before dispatch.
func AssetRefs(g Graph, cat Catalog) ([]AssetRef, error) {
	var refs []AssetRef
	bad := NodeErrors{}
	// Inputs are visited in map order and the results put in (node, input)
	// order at the end: sorting each node's input names would cost an
	// allocation per node on every submit.
	for id, n := range g {
		class, known := cat[n.ClassType]
		for name, raw := range n.Inputs {
			raw = bytes.TrimSpace(raw)
			if isAssetObject(raw) {
				ref, ok := parseAssetObject(raw)
				if !ok {
					bad.add(id, name, ReasonMalformedAssetRef,
						`input %q holds a core/ASSET reference without a string "info.id"`, name)
					continue
				}
				ref.Node, ref.Input = id, name
				refs = append(refs, ref)
				continue
			}
			if !known || len(raw) == 0 || raw[0] != '"' {
				continue
			}
			spec, _, ok := class.Input(name)
			if !ok || !spec.IsCombo() {
				continue
			}
			s, _ := unmarshalString(raw)
			if s == "" {
				continue
			}
			refs = append(refs, AssetRef{Node: id, Input: name, FileName: s, Upload: spec.Upload()})
		}
	}
	if len(bad) > 0 {
		for _, errs := range bad {
			slices.SortFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
		}
		return nil, apierr.New(http.StatusUnprocessableEntity, "missing_asset",
			"the workflow holds malformed asset references").
			WithDetails(map[string]any{"node_errors": bad})
	}
	slices.SortFunc(refs, func(a, b AssetRef) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.Input, b.Input)
	})
	return refs, nil
}

// isAssetObject reports whether raw is an object whose `__type` is
// core/ASSET. A cheap byte test guards the decode.
func isAssetObject(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] != '{' || !bytes.Contains(raw, []byte("__type")) {
		return false
	}
	var probe struct {
		Type *string `json:"__type"`
	}
	if json.Unmarshal(raw, &probe) != nil || probe.Type == nil {
		return false
	}
	return *probe.Type == AssetType
}

func parseAssetObject(raw json.RawMessage) (AssetRef, bool) {
	var obj struct {
		Info map[string]json.RawMessage `json:"info"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Info == nil {
		return AssetRef{}, false
	}
	var ref AssetRef
	if json.Unmarshal(obj.Info["id"], &ref.AssetID) != nil || ref.AssetID == "" {
		return AssetRef{}, false
	}
	// Hints are optional; a non-string hint is ignored, never fatal.
	_ = json.Unmarshal(obj.Info["hash"], &ref.Hash)
	_ = json.Unmarshal(obj.Info["file_path"], &ref.FilePath)
	return ref, true
}
