package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxRawPartition is the longest partition used in a key as it is; longer
// partitions are hashed.
const maxRawPartition = 64

// hashedMark starts a hashed partition. It is not a byte a raw partition
// may contain, so a hashed partition never equals a raw one.
const hashedMark = '#'

// safeByte reports whether c may appear in a partition used as it is.
func safeByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', ':', '/', '@', '=', '+':
		return true
	}
	return false
}

// partitionTag returns the form of partition used in keys: partition itself
// when it is 1 to 64 safe bytes (letters, digits, - . _ : / @ = +), and
// otherwise '#' followed by the first 128 bits of its SHA-256 in hex. The
// result never contains '{' or '}', so it is exactly the key's hash tag.
func partitionTag(partition string) string {
	if n := len(partition); n > 0 && n <= maxRawPartition {
		safe := true
		for i := 0; i < n; i++ {
			if !safeByte(partition[i]) {
				safe = false
				break
			}
		}
		if safe {
			return partition
		}
	}
	sum := sha256.Sum256([]byte(partition))
	var buf [1 + 32]byte
	buf[0] = hashedMark
	hex.Encode(buf[1:], sum[:16])
	return string(buf[:])
}

// hashSuffix ends a partition's key after its hash tag. Stores of earlier
// versions kept a partition's records in a string at prefix{tag} (and,
// before that, every budget's state at prefix{tag}:budget, the name a
// sliding log still uses); the suffix keeps the hash of this layout from
// ever being read as one of those.
const hashSuffix = "#h"

// partitionKey returns prefix{tag}#h, the key of a partition's records,
// and where the tag lies in it.
func partitionKey(prefix, partition string) (key string, tagStart, tagEnd int) {
	tag := partitionTag(partition)
	key = prefix + "{" + tag + "}" + hashSuffix
	tagStart = len(prefix) + 1
	return key, tagStart, tagStart + len(tag)
}

// logKey returns the key of budget's sliding log, prefix{tag}:budget,
// from its partition's key pk.
func logKey(pk, budget string) string {
	return pk[:len(pk)-len(hashSuffix)] + ":" + budget
}

// slotKey returns the key of a concurrency budget's slots,
// prefix{tag}%budget, from its partition's key pk. It is apart from the
// sliding log's key, so a budget that changes algorithm never reads the
// other's key as its own.
func slotKey(pk, budget string) string {
	return pk[:len(pk)-len(hashSuffix)] + "%" + budget
}

// buildKey returns prefix{tag}:budget, the key of a sliding log, and where
// the tag lies in it.
func buildKey(prefix, partition, budget string) (key string, tagStart, tagEnd int) {
	key, tagStart, tagEnd = partitionKey(prefix, partition)
	return logKey(key, budget), tagStart, tagEnd
}

// maxRawName is the longest budget name a partition's record holds as it
// is; longer names are hashed.
const maxRawName = 128

// recordName returns the name of budget's record in a partition's key:
// the name itself when it is at most 128 printable ASCII bytes, otherwise
// a byte 0x01 (which no such name holds) and the first 128 bits of its
// SHA-256 in hex. It never holds a zero byte, which ends a name in the
// record.
func recordName(budget string) string {
	if len(budget) <= maxRawName {
		ok := true
		for i := 0; i < len(budget); i++ {
			if c := budget[i]; c < 0x20 || c > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return budget
		}
	}
	sum := sha256.Sum256([]byte(budget))
	var buf [1 + 32]byte
	buf[0] = 1
	hex.Encode(buf[1:], sum[:16])
	return string(buf[:])
}

// slotOf returns the Redis Cluster hash slot of a key whose hash tag is
// tag: CRC16 (XMODEM) of the tag, modulo 16384.
func slotOf(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return int(crc) & 16383
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
