package tenantapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/quotagate/quotagate/core"
)

// Messages of the API's errors.
const (
	// RateLimitedMessage is the message of every 429.
	RateLimitedMessage = "Too many requests. Please slow down and try again shortly."
	// UnauthorizedMessage is the message of every 401.
	UnauthorizedMessage = "A valid bearer token is required."
)

// NewRequestID returns a fresh request id: 16 random hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

type apiError struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
		Details   struct {
			Reason string `json:"reason"`
		} `json:"details"`
	} `json:"error"`
}

// ErrorBody returns the API's error body with a fresh request id:
//
//	{"error":{"code":"...","message":"...","request_id":"...","details":{"reason":"..."}}}
func ErrorBody(code, message, reason string) []byte {
	var e apiError
	e.Error.Code, e.Error.Message, e.Error.RequestID = code, message, NewRequestID()
	e.Error.Details.Reason = reason
	b, _ := json.Marshal(e) // strings only: always marshals
	return b
}

// ErrorReply is a Reply carrying ErrorBody.
func ErrorReply(status int, code, message, reason string) Reply {
	return Reply{Status: status, Body: ErrorBody(code, message, reason)}
}

// Unauthorized is the reply to a request without a valid credential.
func Unauthorized() Reply {
	return ErrorReply(http.StatusUnauthorized, "ERR_UNAUTHORIZED", UnauthorizedMessage, "unauthenticated")
}

// Deny renders the engine's denials as the API documents them: a 429 with
// the API's JSON error body, a request id of its own, and no Retry-After
// (the engine writes no rate-limit fields either: core.HeadersNone). The
// reason is always rate_limited; the body never names the budget.
func Deny(_ *core.Request, d *core.Decision) core.Denial {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	var r Reply
	switch d.Reason {
	case core.ReasonRateLimited, core.ReasonCostTooHigh:
		r = ErrorReply(http.StatusTooManyRequests, "ERR_RATE_LIMITED", RateLimitedMessage, "rate_limited")
	case core.ReasonNoKey:
		// Authentication runs first, so only a misconfigured route gets here.
		r = Unauthorized()
	case core.ReasonBadCost:
		r = ErrorReply(http.StatusBadRequest, "ERR_INVALID_REQUEST", "The request could not be evaluated.", "invalid_request")
	default: // ReasonUnavailable: only fail-closed budgets, which this API has none of
		r = ErrorReply(http.StatusServiceUnavailable, "ERR_UNAVAILABLE", "The service is temporarily unavailable.", "unavailable")
	}
	return core.Denial{Status: r.Status, Header: h, Body: r.Body}
}
