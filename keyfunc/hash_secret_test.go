package keyfunc

import (
	"bytes"
	"testing"
)

// TestProcessSecret: each call gives 32 fresh bytes that a Hasher accepts.
func TestProcessSecret(t *testing.T) {
	a, b := ProcessSecret(), ProcessSecret()
	if len(a) != 32 || bytes.Equal(a, b) || bytes.Equal(a, make([]byte, 32)) {
		t.Fatalf("two secrets of %d and %d bytes, equal %v: want 32 random bytes each", len(a), len(b), bytes.Equal(a, b))
	}
	if _, err := NewHasher(HashConfig{Secret: a}); err != nil {
		t.Fatal(err)
	}
}
