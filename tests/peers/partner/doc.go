// Package partner provides protocol-faithful local partner servers for
// testing the model router. It is test support only and is never imported by
// product code.
//
// Every peer is an httptest server bound to 127.0.0.1. Each one follows the
// wire protocol of a real partner closely enough that a provider adapter
// written against the peer also works against the partner. Switches (see
// [Option]) turn on each failure a partner can produce. Counters show what the
// gateway actually sent: submissions, concurrency, cancels and the last
// request's headers.
//
// Kinds and the public documentation each follows:
//
//   - [NewSyncJSON]: a synchronous JSON model, like fal.run or OpenAI Images.
//     https://docs.fal.ai/model-endpoints/synchronous-requests,
//     https://platform.openai.com/docs/api-reference/images
//   - [NewSyncBytes]: a synchronous model that answers with raw audio bytes,
//     like ElevenLabs text-to-speech.
//     https://elevenlabs.io/docs/api-reference/text-to-speech/convert
//   - [NewFalQueue]: fal's queue API (submit, status, result, cancel).
//     https://docs.fal.ai/model-endpoints/queue,
//     https://fal.ai/docs/model-apis/errors (model errors),
//     https://docs.fal.ai/documentation/model-apis/request-errors (request errors)
//   - [NewBFL]: Black Forest Labs (submit, then poll polling_url).
//     https://docs.bfl.ai/api_integration/errors,
//     https://docs.bfl.ai/quick_start/generating_images
//   - [NewConstant]: a synchronous JSON peer answering a fixed ~100-byte body
//     at once with minimal allocation, for benchmarks.
//
// # Failure switches by kind
//
// Precedence when several switches are on: hang, then auth, then status, then
// the per-call result switches (validation, refusal, output refusal, result
// status, garbage, empty media).
//
//	switch               sync JSON / sync bytes        fal queue                              BFL
//	WithHang             request never answers         every API request never answers        every API request never answers
//	WithStatus(c)        c + partner error body        c on every API request, flat fal body  c on every API request, {"detail":"…"}
//	WithLatency(d)       response delayed by d         IN_PROGRESS for d after submit         Pending for d after submit
//	WithValidationError  422 {"detail":[…]}            result 422 {"detail":[…]}              submit 422 {"detail":[…]}
//	WithRefusal          JSON: 400 OpenAI error        result 422 detail type                 poll "Request Moderated"
//	                     bytes: 400 {"detail":{…}}     content_policy_violation
//	WithOutputRefusal    as WithRefusal                as WithRefusal                         poll "Content Moderated" after d
//	WithResultStatus(c)  as WithStatus                 result c, flat fal body                poll "Error"
//	WithGarbage          JSON: 200 truncated JSON      result 200 truncated JSON              poll 200 truncated JSON
//	                     bytes: connection cut short
//	WithEmptyMedia       JSON {"images":[]},           result {"images":[]}                   Ready without result.sample
//	                     bytes: 200 with 0 bytes
//	WithNeverComplete    (no effect)                   IN_PROGRESS until CompleteAll/Close    Pending until CompleteAll/Close
//
// For the queue kinds, the per-call switches are captured when a job is
// submitted, so SetOptions changes later submissions, not running jobs. Hang
// and status are read on every request, so a test can submit normally and
// then make the polls hang or fail.
//
// Media URLs in outputs point at the peer itself (GET /_media/<name>), which
// serves a tiny PNG without authentication, the way partners' signed CDN URLs
// work. A gateway that rehosts media can therefore fetch them.
package partner
