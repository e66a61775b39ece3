// Command nethttp serves the Send API example on net/http: the routes of
// package sendapi, each behind the example's authentication and the
// quotagate layer of its rate-limit group.
//
//	go run ./examples/sendapi/nethttp
//	go run ./examples/sendapi/nethttp -addr 127.0.0.1:9090 -redis 127.0.0.1:6379
package main

import (
	"net/http"
	"os"

	"github.com/quotagate/quotagate/examples/internal/serve"
	"github.com/quotagate/quotagate/examples/sendapi"
	"github.com/quotagate/quotagate/nethttp"
)

func main() { os.Exit(sendapi.Main("sendapi-nethttp", newServer)) }

func newServer(app *sendapi.App) (sendapi.Server, error) {
	limit := func(group string) func(http.Handler) http.Handler {
		return nethttp.ForLayer(app.Layer(group))
	}
	email, sms := limit(sendapi.GroupEmailSend), limit(sendapi.GroupSMSSend)
	mgmt, auth := limit(sendapi.GroupManagement), limit(sendapi.GroupAuth)
	// authed: authentication first, so that a request without a valid
	// access key is refused (401) before any budget is charged.
	authed := func(mw func(http.Handler) http.Handler, h http.HandlerFunc) http.Handler {
		return authenticate(app, mw(h))
	}

	mux := http.NewServeMux()
	mux.Handle("POST /v1/email/messages", authed(email, func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			write(w, app.SendEmail(r.Context(), sendapi.CredentialFrom(r.Context()), r.Header.Values(sendapi.HeaderIdempotencyKey), body))
		}
	}))
	mux.Handle("POST /v1/sms/messages", authed(sms, func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			write(w, app.SendSMS(r.Context(), sendapi.CredentialFrom(r.Context()), r.Header.Values(sendapi.HeaderIdempotencyKey), body))
		}
	}))
	mux.Handle("GET /v1/messages/{id}", authed(mgmt, func(w http.ResponseWriter, r *http.Request) {
		write(w, app.GetMessage(sendapi.CredentialFrom(r.Context()), r.PathValue("id")))
	}))
	mux.Handle("GET /v1/webhooks", authed(mgmt, func(w http.ResponseWriter, r *http.Request) {
		write(w, app.ListWebhooks(sendapi.CredentialFrom(r.Context())))
	}))
	mux.Handle("POST /v1/webhooks", authed(mgmt, func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			write(w, app.CreateWebhook(sendapi.CredentialFrom(r.Context()), body))
		}
	}))
	mux.Handle("DELETE /v1/webhooks/{id}", authed(mgmt, func(w http.ResponseWriter, r *http.Request) {
		write(w, app.DeleteWebhook(sendapi.CredentialFrom(r.Context()), r.PathValue("id")))
	}))
	// Unauthenticated: limited per client IP.
	mux.Handle("POST /v1/auth/login", auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			write(w, app.Login(body))
		}
	})))
	mux.Handle("POST /v1/auth/password-reset", auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			write(w, app.PasswordReset(body))
		}
	})))
	return serve.HTTPServer(mux), nil
}

// authenticate resolves the access key and stores its credential in the
// request's context, where the layers' key functions and the handlers find
// it; it answers 401 itself when there is no valid key.
func authenticate(app *sendapi.App, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, denied := app.Authenticate(r.Header.Values("Authorization"))
		if denied != nil {
			write(w, *denied)
			return
		}
		next.ServeHTTP(w, r.WithContext(sendapi.WithCredential(r.Context(), cred)))
	})
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, denied := sendapi.ReadBody(r.Body)
	if denied != nil {
		write(w, *denied)
		return nil, false
	}
	return body, true
}

// write writes a handler's response. The rate-limit fields the layer set
// are already in w's header.
func write(w http.ResponseWriter, resp sendapi.Response) {
	h := w.Header()
	for _, f := range resp.Fields() {
		h.Add(f[0], f[1])
	}
	if resp.Body != nil {
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
