// Package builtin executes a ComfyUI API-format prompt made of ComfyUI's core
// image nodes without ComfyUI: no Python, no GPU. It is the `builtin` pool
// kind. It reproduces ComfyUI v0.3.64's tensor semantics (IMAGE is float32
// [B,H,W,3] in 0..1, MASK is float32 [B,H,W]) and its float32 arithmetic, so
// that the files it saves are the ones ComfyUI would save for the same
// prompt.
//
// Nodes: LoadImage, SaveImage, PreviewImage, EmptyImage, ImageInvert,
// ImageScale, ImageScaleBy, ImageCrop, ImageFlip, ImageRotate, ImageBlur,
// ImageBlend. ObjectInfo publishes them in /object_info shape; Execute runs a
// prompt.
//
// Bit-exact with ComfyUI: LoadImage of 8-bit PNG (and the 16-bit rules in
// decodeImage), SaveImage's clip-and-truncate, EmptyImage, ImageInvert,
// ImageCrop, ImageFlip, ImageRotate, ImageBlend's arithmetic, nearest-exact
// scaling. Note that LoadImage → ImageInvert → SaveImage is NOT 255-v for
// every v: float32 puts 159 of the 256 values one below (65 → 189), and this
// package reproduces that, because that is what ComfyUI writes.
//
// Close but not guaranteed bit-exact (DIFFERENCES):
//   - bilinear, bicubic, area: torch's formulas and float32 operation order
//     as read from its CPU kernels; a vectorised kernel that fuses or reorders
//     can differ in the last float32 bit, which can move a saved 8-bit value
//     by 1 where it sits on a truncation boundary.
//   - lanczos: an emulation of Pillow's 8-bit fixed-point resampler; should
//     match, not verified against Pillow.
//   - ImageBlur: the same kernel as ComfyUI, applied as a row pass then a
//     column pass with 1D weights whose outer product is ComfyUI's 2D kernel
//     up to float32 rounding, accumulated in float64 (torch's conv2d order
//     is unknowable), and exp comes from Go's math; differences are float32
//     rounding.
//   - ImageBlend with image2 of another size: the bicubic resize above.
//   - JPEG: Go's decoder (its IDCT, no "fancy" chroma upsampling) differs
//     from libjpeg-turbo's by a few levels per pixel.
//   - Not supported: GIF, WebP, TIFF, multi-frame files (APNG loads its
//     first frame; ComfyUI would batch all frames), 16-bit gray PNG follows
//     Pillow's older mode "I" path (min(v/255, 255)).
//   - SaveImage's counter is per job (per type/subfolder/prefix), not "the
//     highest file on disk + 1"; %date:...% is frontend-side and not
//     expanded, as in ComfyUI's backend.
package builtin
