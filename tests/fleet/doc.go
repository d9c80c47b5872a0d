// Package fleet tests and measures comfygate driving fleets of ComfyUI
// workers (tests/peers/comfyui): model-affinity dispatch, workers that come
// and go (DNS, admin API), and a hundred workers in one pool. The
// benchmarks skip unless COMFYGATE_BENCH=1 (see BENCHMARKS.md).
package fleet
