// Package nativeapi is the domain side of comfy_native, the ComfyUI-compatible
// front: it answers ComfyUI's own HTTP and WebSocket protocol (/prompt,
// /queue, /history, /view, /upload/image, /ws, …) over comfygate's jobs and
// assets. A prompt becomes an ordinary v2 job through the jobs service, so
// the same jobs are visible under /api/v2/jobs; this package only
// translates between ComfyUI's shapes and those jobs, and keeps the few
// records ComfyUI's protocol needs beside them (storage.NativeStore: the
// WebSocket session of a prompt, what the history hides). It knows nothing
// of Caddy.
package nativeapi
