// Package browsersafe tests what web pages can make a user's browser do
// to a gateway (issue 38): over real HTTP, the requests a browser sends
// on a page's behalf — cross-site simple POSTs (text/plain, a form,
// multipart), Origin: null, Sec-Fetch-Site: cross-site, WebSocket
// handshakes, a DNS-rebound Host — against every surface (the v2 API of
// the self-hosted example, the ComfyUI-compatible front, the model router,
// the console, the workers admin API), beside the requests an SDK or curl
// sends, which must keep working; and in headless Chromium, a page of
// another site and a rebound page against the self-hosted example, and an
// allowed origin's page using CORS.
package browsersafe
