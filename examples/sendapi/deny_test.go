package sendapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestDenyRateLimited(t *testing.T) {
	d := core.Decision{Reason: core.ReasonRateLimited, DeniedBy: "email_send", RetryAfter: 12300 * time.Millisecond}
	den := Deny(nil, &d)
	if den.Status != http.StatusTooManyRequests {
		t.Fatalf("status %d", den.Status)
	}
	for k, want := range map[string]string{"Retry-After": "13", "Content-Type": "application/json", "Cache-Control": "no-store"} {
		if got := den.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	const want = `{"error":{"type":"rate_limit_error","code":"E01003","name":"RateLimited","message":"Rate limit exceeded for group \"email_send\". Retry after 13 seconds."}}`
	if string(den.Body) != want {
		t.Fatalf("body\n%s\nwant\n%s", den.Body, want)
	}
}

func TestDenyOtherReasons(t *testing.T) {
	for _, c := range []struct {
		reason core.Reason
		err    error
		status int
		typ    string
	}{
		{core.ReasonNoKey, &core.MissingCredentialError{Challenge: "AccessKey", Msg: "no key"}, 401, "authentication_error"},
		{core.ReasonNoKey, errors.New("two Authorization lines"), 400, "invalid_request_error"},
		{core.ReasonBadCost, nil, 400, "invalid_request_error"},
		{core.ReasonCostTooHigh, nil, 429, "invalid_request_error"},
		{core.ReasonUnavailable, nil, 503, "api_error"},
	} {
		d := core.Decision{Reason: c.reason, Err: c.err, DeniedBy: "auth", RetryAfter: time.Second}
		den := Deny(nil, &d)
		var body struct {
			Error Error `json:"error"`
		}
		if err := json.Unmarshal(den.Body, &body); err != nil {
			t.Fatalf("%v: body %s: %v", c.reason, den.Body, err)
		}
		if den.Status != c.status || body.Error.Type != c.typ || body.Error.Code == "" || den.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%v: %d %v %s", c.reason, den.Status, den.Header, den.Body)
		}
		if (den.Status == 401) != (den.Header.Get("WWW-Authenticate") == "AccessKey") {
			t.Errorf("%v: %d with WWW-Authenticate %q", c.reason, den.Status, den.Header.Get("WWW-Authenticate"))
		}
	}
}
