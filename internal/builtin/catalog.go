package builtin

import (
	"encoding/json"
)

// maxResolution is ComfyUI's MAX_RESOLUTION (nodes.py), the upper bound of
// every width/height widget.
const maxResolution = 16384

// inputDef declares one input of a node the way ComfyUI's INPUT_TYPES does.
// typ is a socket type (IMAGE, MASK), a widget type (INT, FLOAT, STRING) or
// "COMBO" for a list of options. meta holds the option object published in
// /object_info (default, min, max, step, tooltip, ...); min/max are repeated
// as numbers so that the executor can enforce them without parsing meta.
type inputDef struct {
	name     string
	typ      string
	options  []string
	meta     map[string]any
	min, max float64
	ranged   bool
}

// nodeDef is one node class: its catalog entry and its implementation.
type nodeDef struct {
	name         string
	displayName  string
	category     string
	description  string
	pythonModule string
	// v3 marks nodes ComfyUI defines with its v3 schema (comfy_api io); their
	// /object_info entries carry a few extra keys.
	v3         bool
	required   []inputDef
	hidden     bool // takes the hidden PROMPT and EXTRA_PNGINFO inputs
	outputs    []string
	outputNode bool
	run        func(c *nodeCall) ([]any, error)
	// cost is what run allocates (see cost.go); chargesItself marks a run
	// that charges as it goes, whose cost serves estimates only.
	cost          func(c *nodeCall) ([]any, int64, error)
	chargesItself bool
}

func intInput(name string, def, lo, hi int, extra map[string]any) inputDef {
	meta := map[string]any{"default": def, "min": lo, "max": hi, "step": 1}
	for k, v := range extra {
		meta[k] = v
	}
	return inputDef{name: name, typ: "INT", meta: meta, min: float64(lo), max: float64(hi), ranged: true}
}

func floatInput(name string, def, lo, hi, step float64) inputDef {
	meta := map[string]any{"default": def, "min": lo, "max": hi, "step": step}
	return inputDef{name: name, typ: "FLOAT", meta: meta, min: lo, max: hi, ranged: true}
}

func comboInput(name string, options []string) inputDef {
	return inputDef{name: name, typ: "COMBO", options: options}
}

func socketInput(name, typ string) inputDef { return inputDef{name: name, typ: typ} }

var upscaleMethods = []string{"nearest-exact", "bilinear", "area", "bicubic", "lanczos"}

// catalog lists every node the executor implements, keyed by class_type.
// Widget bounds and defaults are ComfyUI v0.3.64's (nodes.py,
// comfy_extras/nodes_images.py, comfy_extras/nodes_post_processing.py).
var catalog = buildCatalog()

func buildCatalog() map[string]*nodeDef {
	defs := []*nodeDef{
		{
			name: "LoadImage", displayName: "Load Image", category: "image", pythonModule: "nodes",
			// The option list is empty: file names are the caller's assets,
			// which the gateway resolves, not a directory listing.
			required:      []inputDef{{name: "image", typ: "COMBO", options: []string{}, meta: map[string]any{"image_upload": true}}},
			outputs:       []string{"IMAGE", "MASK"},
			run:           runLoadImage,
			cost:          costLoadImage,
			chargesItself: true,
		},
		{
			name: "SaveImage", displayName: "Save Image", category: "image", pythonModule: "nodes",
			description: "Saves the input images to your ComfyUI output directory.",
			required: []inputDef{
				{name: "images", typ: "IMAGE", meta: map[string]any{"tooltip": "The images to save."}},
				{name: "filename_prefix", typ: "STRING", meta: map[string]any{"default": "ComfyUI", "tooltip": "The prefix for the file to save. This may include formatting information such as %date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from nodes."}},
			},
			hidden: true, outputNode: true,
			run:  runSaveImage,
			cost: costSave,
		},
		{
			name: "PreviewImage", displayName: "Preview Image", category: "image", pythonModule: "nodes",
			description: "Saves the input images to your ComfyUI output directory.",
			required:    []inputDef{socketInput("images", "IMAGE")},
			hidden:      true, outputNode: true,
			run:  runPreviewImage,
			cost: costSave,
		},
		{
			name: "EmptyImage", displayName: "EmptyImage", category: "image", pythonModule: "nodes",
			required: []inputDef{
				intInput("width", 512, 1, maxResolution, nil),
				intInput("height", 512, 1, maxResolution, nil),
				{name: "batch_size", typ: "INT", meta: map[string]any{"default": 1, "min": 1, "max": 4096}, min: 1, max: 4096, ranged: true},
				intInput("color", 0, 0, 0xFFFFFF, map[string]any{"display": "color"}),
			},
			outputs: []string{"IMAGE"},
			run:     runEmptyImage,
			cost:    costEmptyImage,
		},
		{
			name: "ImageInvert", displayName: "Invert Image", category: "image", pythonModule: "nodes",
			required: []inputDef{socketInput("image", "IMAGE")},
			outputs:  []string{"IMAGE"},
			run:      runImageInvert,
			cost:     sameShapeCost("image"),
		},
		{
			name: "ImageScale", displayName: "Upscale Image", category: "image/upscaling", pythonModule: "nodes",
			required: []inputDef{
				socketInput("image", "IMAGE"),
				comboInput("upscale_method", upscaleMethods),
				intInput("width", 512, 0, maxResolution, nil),
				intInput("height", 512, 0, maxResolution, nil),
				comboInput("crop", []string{"disabled", "center"}),
			},
			outputs: []string{"IMAGE"},
			run:     runImageScale,
			cost:    costImageScale,
		},
		{
			name: "ImageScaleBy", displayName: "Upscale Image By", category: "image/upscaling", pythonModule: "nodes",
			required: []inputDef{
				socketInput("image", "IMAGE"),
				comboInput("upscale_method", upscaleMethods),
				floatInput("scale_by", 1.0, 0.01, 8.0, 0.01),
			},
			outputs: []string{"IMAGE"},
			run:     runImageScaleBy,
			cost:    costImageScaleBy,
		},
		{
			name: "ImageCrop", displayName: "Image Crop", category: "image/transform", pythonModule: "comfy_extras.nodes_images",
			required: []inputDef{
				socketInput("image", "IMAGE"),
				intInput("width", 512, 1, maxResolution, nil),
				intInput("height", 512, 1, maxResolution, nil),
				intInput("x", 0, 0, maxResolution, nil),
				intInput("y", 0, 0, maxResolution, nil),
			},
			outputs: []string{"IMAGE"},
			run:     runImageCrop,
			cost:    costImageCrop,
		},
		{
			name: "ImageFlip", displayName: "ImageFlip", category: "image/transform", pythonModule: "comfy_extras.nodes_images",
			required: []inputDef{socketInput("image", "IMAGE"), comboInput("flip_method", []string{"x-axis: vertically", "y-axis: horizontally"})},
			outputs:  []string{"IMAGE"},
			run:      runImageFlip,
			cost:     sameShapeCost("image"),
		},
		{
			name: "ImageRotate", displayName: "ImageRotate", category: "image/transform", pythonModule: "comfy_extras.nodes_images",
			required: []inputDef{socketInput("image", "IMAGE"), comboInput("rotation", []string{"none", "90 degrees", "180 degrees", "270 degrees"})},
			outputs:  []string{"IMAGE"},
			run:      runImageRotate,
			cost:     costImageRotate,
		},
		{
			name: "ImageBlur", displayName: "Image Blur", category: "image/postprocessing", pythonModule: "comfy_extras.nodes_post_processing", v3: true,
			required: []inputDef{
				socketInput("image", "IMAGE"),
				intInput("blur_radius", 1, 1, 31, nil),
				floatInput("sigma", 1.0, 0.1, 10.0, 0.1),
			},
			outputs: []string{"IMAGE"},
			run:     runImageBlur,
			cost:    costImageBlur,
		},
		{
			name: "ImageBlend", displayName: "Image Blend", category: "image/postprocessing", pythonModule: "comfy_extras.nodes_post_processing", v3: true,
			required: []inputDef{
				socketInput("image1", "IMAGE"),
				socketInput("image2", "IMAGE"),
				floatInput("blend_factor", 0.5, 0.0, 1.0, 0.01),
				comboInput("blend_mode", blendModes),
			},
			outputs: []string{"IMAGE"},
			run:     runImageBlend,
			cost:    costImageBlend,
		},
	}
	m := make(map[string]*nodeDef, len(defs))
	for _, d := range defs {
		m[d.name] = d
	}
	return m
}

// IsOutputNode reports whether classType is an output node (OUTPUT_NODE) of
// this executor's catalog.
func IsOutputNode(classType string) bool {
	d, ok := catalog[classType]
	return ok && d.outputNode
}

// ObjectInfo returns the catalog in the shape of ComfyUI's GET /object_info:
// {class: {input:{required,hidden}, input_order, output, output_is_list,
// output_name, name, display_name, description, python_module, category,
// output_node}}. A workflow validator written against ComfyUI workers can
// therefore validate builtin prompts unchanged.
//
// Combos use the legacy form [[options...], {meta}] for every node, including
// ImageBlend, which ComfyUI v0.3.64 publishes in the v3 form
// ["COMBO", {"options": [...]}]; the values are identical.
//
// LoadImage.image lists no options: its value names one of the caller's
// assets, so a validator must treat it as an asset reference and skip the
// membership check (ComfyUI itself skips it because LoadImage defines
// VALIDATE_INPUTS for image).
func ObjectInfo() []byte {
	out := make(map[string]any, len(catalog))
	for name, d := range catalog {
		out[name] = d.info()
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic("builtin: object_info does not marshal: " + err.Error()) // static data; cannot happen
	}
	return b
}

func (d *nodeDef) info() map[string]any {
	required := make(map[string]any, len(d.required))
	order := make([]string, 0, len(d.required))
	for _, in := range d.required {
		required[in.name] = in.spec(d.v3)
		order = append(order, in.name)
	}
	input := map[string]any{"required": required}
	inputOrder := map[string]any{"required": order}
	if d.hidden {
		input["hidden"] = map[string]any{"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}
		inputOrder["hidden"] = []string{"prompt", "extra_pnginfo"}
	}
	outputs := append([]string{}, d.outputs...)
	isList := make([]bool, len(outputs))
	info := map[string]any{
		"input":          input,
		"input_order":    inputOrder,
		"output":         outputs,
		"output_is_list": isList,
		"output_name":    outputs,
		"name":           d.name,
		"display_name":   d.displayName,
		"description":    d.description,
		"python_module":  d.pythonModule,
		"category":       d.category,
		"output_node":    d.outputNode,
	}
	if d.v3 {
		info["output_tooltips"] = make([]any, len(outputs))
		info["deprecated"] = false
		info["experimental"] = false
		info["api_node"] = false
	}
	return info
}

// spec renders one input as ComfyUI does: ["IMAGE"], ["INT", {...}] or
// [[options], {...}]. v3 nodes always carry an option object.
func (in inputDef) spec(v3 bool) []any {
	var head any = in.typ
	if in.typ == "COMBO" {
		head = append([]string{}, in.options...)
	}
	if len(in.meta) == 0 && !v3 {
		return []any{head}
	}
	meta := make(map[string]any, len(in.meta))
	for k, v := range in.meta {
		meta[k] = v
	}
	return []any{head, meta}
}
