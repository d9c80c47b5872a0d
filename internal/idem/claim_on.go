//go:build !chaosbroken

package idem

// skipClaim is false in every real build; see claim_broken.go.
const skipClaim = false
