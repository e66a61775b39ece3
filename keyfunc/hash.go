package keyfunc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"

	"github.com/quotagate/quotagate/core"
)

// MinSecretLen is the shortest application secret a [Hasher] accepts.
const MinSecretLen = 16

// Digest sizes a [Hasher] accepts, in bytes of the HMAC-SHA-256 output kept.
const (
	MinDigestSize     = 8
	MaxDigestSize     = sha256.Size
	DefaultDigestSize = 16
)

// Secret is key material: an application secret. It prints as "[redacted]"
// with every fmt verb, so a configuration struct that holds one can be
// logged safely.
type Secret []byte

// String returns "[redacted]".
func (Secret) String() string { return "[redacted]" }

// GoString returns "[redacted]".
func (Secret) GoString() string { return "[redacted]" }

// Format writes "[redacted]" whatever the verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// ProcessSecret returns 32 random bytes, a secret that lives as long as
// the process: for keys that never leave it, on the memory store, where
// inventing and keeping a secret would be work for nothing.
//
//	hasher, err := keyfunc.NewHasher(keyfunc.HashConfig{Secret: keyfunc.ProcessSecret()})
//
// It is not the default, and never right with a shared store (Redis):
// instances with different secrets put one API key in a different budget
// each, so a client gets the quota once per instance, and a restart moves
// every key to a fresh budget. There, give every instance the same
// secret from the application's configuration.
func ProcessSecret() Secret {
	s := make(Secret, 32)
	_, _ = rand.Read(s) // never fails (crypto/rand, Go 1.24 and later)
	return s
}

// Encoding is how a [Hasher] renders digests.
type Encoding int

const (
	// Hex renders digests as lower-case hexadecimal (2 characters a byte).
	Hex Encoding = iota
	// Base64 renders digests as unpadded URL-safe base64 (RFC 4648 §5).
	Base64
)

// HashConfig configures a [Hasher].
type HashConfig struct {
	// Secret is the HMAC key, at least MinSecretLen bytes; 32 random
	// bytes are recommended. Keep it stable: changing it moves every
	// hashed key to a fresh budget.
	Secret Secret
	// Size is how many bytes of the digest are kept, MinDigestSize to
	// MaxDigestSize; 0 means DefaultDigestSize (16, 128 bits).
	Size int
	// Encoding renders the kept bytes; the zero value is Hex.
	Encoding Encoding
}

// Hasher turns identities into partition keys with a keyed hash:
// HMAC-SHA-256 under an application secret, truncated and encoded. Without
// the secret a key cannot be linked back to the identity, even by someone
// who can read the store, the logs or the metrics. A Hasher is safe for
// concurrent use. Create one with [NewHasher]; the zero Hasher is not
// usable.
type Hasher struct {
	ready bool
	size  int
	enc   Encoding
	pool  sync.Pool // *hashState
}

type hashState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// maxPooledInput is the largest input whose copy a pooled state keeps.
const maxPooledInput = 1024

// NewHasher validates cfg and returns a Hasher. The secret is copied; the
// error never contains it.
func NewHasher(cfg HashConfig) (*Hasher, error) {
	var errs []error
	if len(cfg.Secret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("keyfunc: the hash secret is %d bytes; at least %d are required", len(cfg.Secret), MinSecretLen))
	}
	size := cfg.Size
	if size == 0 {
		size = DefaultDigestSize
	}
	if size < MinDigestSize || size > MaxDigestSize {
		errs = append(errs, fmt.Errorf("keyfunc: digest size %d is outside %d to %d bytes", cfg.Size, MinDigestSize, MaxDigestSize))
	}
	if cfg.Encoding != Hex && cfg.Encoding != Base64 {
		errs = append(errs, fmt.Errorf("keyfunc: unknown encoding %d", int(cfg.Encoding)))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	secret := append([]byte(nil), cfg.Secret...)
	h := &Hasher{ready: true, size: size, enc: cfg.Encoding}
	h.pool.New = func() any { return &hashState{mac: hmac.New(sha256.New, secret)} }
	return h, nil
}

// Sum returns the partition key of identity s: the first Size bytes of
// HMAC-SHA-256(secret, s), encoded. It allocates only the returned string.
func (h *Hasher) Sum(s string) string {
	st := h.pool.Get().(*hashState)
	st.mac.Reset()
	var in []byte
	if len(s) <= maxPooledInput {
		st.buf = append(st.buf[:0], s...)
		in = st.buf
	} else {
		in = []byte(s)
	}
	st.mac.Write(in)
	sum := st.mac.Sum(st.sum[:0])
	clear(in) // no copy of the identity outlives the call
	var out [2 * MaxDigestSize]byte
	var n int
	if h.enc == Base64 {
		n = base64.RawURLEncoding.EncodedLen(h.size)
		base64.RawURLEncoding.Encode(out[:n], sum[:h.size])
	} else {
		n = hex.Encode(out[:], sum[:h.size])
	}
	clear(st.sum[:])
	h.pool.Put(st)
	return string(out[:n])
}

// String describes the hasher without its secret, e.g.
// "hmac-sha256/16/hex".
func (h *Hasher) String() string {
	enc := "hex"
	if h.enc == Base64 {
		enc = "base64"
	}
	return "hmac-sha256/" + strconv.Itoa(h.size) + "/" + enc
}

// Hashed returns a key function whose key is h.Sum of kf's key: use it for
// identities that must not appear in stores or logs (e-mail addresses,
// account numbers). kf's errors are returned unchanged. Hashed panics if h
// or kf is nil, or if h was not made by NewHasher.
func Hashed(h *Hasher, kf core.KeyFunc) core.KeyFunc {
	if h == nil || !h.ready || kf == nil {
		panic("keyfunc: Hashed with a nil key function or a Hasher not made by NewHasher")
	}
	return func(r *core.Request) (string, error) {
		k, err := kf(r)
		if err != nil {
			return "", err
		}
		return h.Sum(k), nil
	}
}
