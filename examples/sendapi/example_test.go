package sendapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/examples/sendapi"
	"github.com/quotagate/quotagate/nethttp"
)

// The App on the memory stores, one route behind net/http: authentication
// first, then the layer of the route's group, as the nethttp command wires
// every route. initech's email_send override (50) replaces its plan's 100.
func ExampleNew() {
	store := memstore.MustNew(memstore.Config{})
	defer store.Close()
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := sendapi.LoadConfig("example", nil, noEnv, io.Discard)
	if err != nil {
		panic(err)
	}
	app, err := sendapi.New(cfg, sendapi.Deps{
		Store:       store,
		Idempotency: sendapi.NewMemoryIdempotency(0),
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}

	limit := nethttp.ForLayer(app.Layer(sendapi.GroupEmailSend))
	send := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp := app.SendEmail(r.Context(), sendapi.CredentialFrom(r.Context()), r.Header.Values(sendapi.HeaderIdempotencyKey), body)
		w.WriteHeader(resp.Status)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, denied := app.Authenticate(r.Header.Values("Authorization"))
		if denied != nil {
			w.WriteHeader(denied.Status)
			return
		}
		send.ServeHTTP(w, r.WithContext(sendapi.WithCredential(r.Context(), cred)))
	}))
	defer srv.Close()

	for _, key := range []string{"ak_initech_1", "ak_acme_1", "ak_unknown"} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/email/messages", strings.NewReader(`{"to":["a@example.com","b@example.com"]}`))
		req.Header.Set("Authorization", "AccessKey "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(key, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// ak_initech_1 202 "email_send";q=50;w=60
	// ak_acme_1 202 "email_send";q=100;w=60
	// ak_unknown 401
}

func ExampleParseAccessKey() {
	key, err := sendapi.ParseAccessKey([]string{"AccessKey ak_acme_1"})
	fmt.Printf("%q %v\n", key, err)
	_, err = sendapi.ParseAccessKey([]string{"Bearer ak_acme_1"})
	fmt.Println(err)
	_, err = sendapi.ParseAccessKey([]string{"AccessKey ak_acme_1", "AccessKey ak_acme_2"})
	fmt.Println(err)
	// Output:
	// "ak_acme_1" <nil>
	// no AccessKey credential
	// several Authorization field lines
}

func ExampleParseIdempotencyKey() {
	for _, v := range []string{`"8e03978e-40d5"`, `8e03978e-40d5`, `two words`} {
		key, err := sendapi.ParseIdempotencyKey([]string{v})
		fmt.Printf("%q %v\n", key, err != nil)
	}
	// Output:
	// "8e03978e-40d5" false
	// "8e03978e-40d5" false
	// "" true
}
