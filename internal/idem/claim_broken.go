//go:build chaosbroken

package idem

// skipClaim = true is a deliberately broken build (go build -tags
// chaosbroken) that takes no idempotency claim and records no key, used
// only by tests/chaos's TestCheckerCatchesSkippedClaim to show that the
// chaos checker catches a duplicate. Never build a release with the tag.
const skipClaim = true
