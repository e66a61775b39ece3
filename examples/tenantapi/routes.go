package tenantapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// Route is one endpoint of the Tenant API, independent of the router that
// serves it. Each main registers every route with, in this order: the
// example's authentication middleware for Access, quotagate's middleware
// for Layer, and Handle.
type Route struct {
	// Method and Path say what the route answers. Path parameters are
	// written {name}, as net/http's ServeMux writes them; [Route.ColonPath]
	// gives the :name form Gin, Echo and Fiber use.
	Method string
	Path   string
	// Access is the credential the route requires.
	Access Access
	// Budgets names the policy layer: the budgets a request spends.
	Budgets string
	// Layer is that layer on the API's engine.
	Layer *core.Layer
	// Handle answers an authenticated, admitted request.
	Handle func(*Call) Reply
}

// ColonPath returns Path with {name} parameters written :name.
func (r Route) ColonPath() string {
	var sb strings.Builder
	for _, seg := range strings.Split(r.Path, "/")[1:] {
		sb.WriteByte('/')
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			sb.WriteByte(':')
			sb.WriteString(seg[1 : len(seg)-1])
		} else {
			sb.WriteString(seg)
		}
	}
	return sb.String()
}

// Call is what a handler gets: the caller's identity, the path
// parameters and the request body.
type Call struct {
	Identity Identity
	// Param returns a path parameter by name.
	Param func(name string) string
	// Body is the request body, at most MaxBody bytes.
	Body []byte
}

// Reply is a handler's JSON response.
type Reply struct {
	Status int
	Body   []byte
}

// MaxBody is the largest request body the mains read: room for a bulk
// disable of MaxBulkIDs long ids.
const MaxBody = 1 << 20

// BodyError is the reply to a request whose body could not be read (err
// from reading it through http.MaxBytesReader): 413 when it is larger than
// MaxBody, 400 otherwise (it did not arrive before the server's
// ReadTimeout, or the connection broke).
func BodyError(err error) Reply {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return ErrorReply(http.StatusRequestEntityTooLarge, "ERR_INVALID_REQUEST", "The body is too large.", "invalid_body")
	}
	return ErrorReply(http.StatusBadRequest, "ERR_INVALID_REQUEST", "The body could not be read.", "invalid_body")
}

// MaxBulkIDs is how many ids one bulk disable may carry.
const MaxBulkIDs = 500

func jsonReply(status int, v any) Reply {
	b, err := json.Marshal(v)
	if err != nil {
		return ErrorReply(http.StatusInternalServerError, "ERR_INTERNAL", "The response could not be encoded.", "internal")
	}
	return Reply{Status: status, Body: b}
}

type obj = map[string]any

// routes returns the API's endpoints; New binds their layers.
func routes() []Route {
	ok := func(name string) func(*Call) Reply {
		return func(*Call) Reply { return jsonReply(http.StatusOK, obj{"ok": true, "endpoint": name}) }
	}
	public := func(method, path, layer string) Route {
		return Route{Method: method, Path: path, Access: Public, Budgets: layer, Handle: ok(layer)}
	}
	return []Route{
		{Method: "GET", Path: "/api/reports/{name}", Access: OperatorOnly, Budgets: "reports", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "report": c.Param("name"), "rows": []any{}})
		}},
		{Method: "POST", Path: "/api/exports", Access: OperatorOnly, Budgets: "exports", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusAccepted, obj{"tenant": c.Identity.Tenant, "export": "queued"})
		}},
		{Method: "GET", Path: "/api/dashboard/values", Access: OperatorOnly, Budgets: "dashboard_values", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "values": obj{"online": 42}})
		}},
		{Method: "POST", Path: "/api/checks", Access: OperatorOnly, Budgets: "checks", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "check": "passed"})
		}},
		{Method: "POST", Path: "/api/outbound", Access: OperatorOnly, Budgets: "outbound", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusAccepted, obj{"tenant": c.Identity.Tenant, "outbound": "sent"})
		}},
		{Method: "POST", Path: "/api/users/{id}/disable", Access: OperatorOnly, Budgets: "users", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "disabled": []string{c.Param("id")}})
		}},
		{Method: "POST", Path: "/api/users/bulk-disable", Access: OperatorOnly, Budgets: "users", Handle: func(c *Call) Reply {
			ids, err := ParseBulkDisable(c.Body)
			if err != nil {
				return ErrorReply(http.StatusBadRequest, "ERR_INVALID_REQUEST", err.Error(), "invalid_body")
			}
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "disabled": len(ids)})
		}},
		{Method: "GET", Path: "/api/users", Access: OperatorOnly, Budgets: "users", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "users": []string{"u1", "u2"}})
		}},
		{Method: "GET", Path: "/api/cards/{id}/timeline", Access: OperatorOnly, Budgets: "card_timeline", Handle: func(c *Call) Reply {
			// The budget was charged before this visibility check, on
			// purpose: probing the id space costs as much as reading it.
			id := c.Param("id")
			if strings.HasPrefix(id, "x") {
				return ErrorReply(http.StatusNotFound, "ERR_NOT_FOUND", "No such card.", "not_found")
			}
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "card": id, "events": []any{}})
		}},
		{Method: "POST", Path: "/api/credentials", Access: OperatorOnly, Budgets: "credentials", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusCreated, obj{"tenant": c.Identity.Tenant, "credential": "issued"})
		}},
		{Method: "GET", Path: "/portal/me", Access: SubscriberOnly, Budgets: "portal", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"tenant": c.Identity.Tenant, "subscriber": c.Identity.Subscriber})
		}},
		{Method: "POST", Path: "/portal/topup", Access: SubscriberOnly, Budgets: "portal", Handle: func(c *Call) Reply {
			return jsonReply(http.StatusOK, obj{"subscriber": c.Identity.Subscriber, "topup": "accepted"})
		}},
		public("POST", "/portal/zerologin", "portal_zerologin"),
		public("POST", "/public/login", "public_login"),
		public("POST", "/public/signup", "public_signup"),
		public("GET", "/public/resolve-host", "public_resolve_host"),
		public("GET", "/public/slug-available", "public_slug_available"),
		public("GET", "/public/captcha", "public_captcha"),
		public("POST", "/public/payment-return", "public_payment_return"),
		public("POST", "/public/forms", "public_forms"),
	}
}

// ParseBulkDisable reads the body of POST /api/users/bulk-disable,
// {"ids":["u1","u2",...]}: an object whose only member is ids, one to
// MaxBulkIDs non-empty strings of at most 128 bytes.
func ParseBulkDisable(body []byte) ([]string, error) {
	var req struct {
		IDs *[]json.RawMessage `json:"ids"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, errors.New(`the body must be a JSON object {"ids":["u1",...]}`)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return nil, errors.New("the body holds more than one JSON value")
	}
	if req.IDs == nil {
		return nil, errors.New("ids is missing")
	}
	raw := *req.IDs
	switch {
	case len(raw) == 0:
		return nil, errors.New("ids is empty")
	case len(raw) > MaxBulkIDs:
		return nil, fmt.Errorf("ids holds %d ids; at most %d are allowed", len(raw), MaxBulkIDs)
	}
	ids := make([]string, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &ids[i]); err != nil || len(r) == 0 || r[0] != '"' {
			return nil, errors.New("ids[" + strconv.Itoa(i) + "] is not a string")
		}
		if ids[i] == "" || len(ids[i]) > 128 {
			return nil, errors.New("ids[" + strconv.Itoa(i) + "] must be 1 to 128 bytes long")
		}
	}
	return ids, nil
}
