package admission

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	keyGold   = "sk-gold-7f3a9c"
	keyGold2  = "sk-gold-second"
	keySilver = "sk-silver-1b2c"
)

func keyedPartitions() []Partition {
	return []Partition{
		{Name: "default", Weight: 1},
		{Name: "gold", Weight: 3, APIKeys: []string{keyGold, keyGold2}},
		{Name: "silver", Weight: 1, APIKeys: []string{keySilver}},
	}
}

func TestResolver(t *testing.T) {
	withKeys, err := NewResolver(keyedPartitions(), "default", "X-Kvgate-Partition")
	require.NoError(t, err)
	noKeys, err := NewResolver([]Partition{{Name: "default", Weight: 1}, {Name: "batch", Weight: 1}}, "default", "")
	require.NoError(t, err)
	noHeader, err := NewResolver(keyedPartitions(), "default", "")
	require.NoError(t, err)

	tests := []struct {
		name          string
		r             *Resolver
		authorization string
		header        string
		want          string
		err           error
	}{
		{"bearer key selects its partition", withKeys, "Bearer " + keyGold, "", "gold", nil},
		{"a partition's second key", withKeys, "Bearer " + keyGold2, "", "gold", nil},
		{"scheme in lower case", withKeys, "bearer " + keySilver, "", "silver", nil},
		{"scheme in upper case", withKeys, "BEARER " + keySilver, "", "silver", nil},
		{"extra spaces and tabs", withKeys, "  Bearer \t  " + keySilver + "  ", "", "silver", nil},
		{"unknown key", withKeys, "Bearer sk-nobody", "", "", ErrInvalidAPIKey},
		{"missing key when keys exist", withKeys, "", "", "", ErrInvalidAPIKey},
		{"scheme without token", withKeys, "Bearer", "", "", ErrInvalidAPIKey},
		{"token without scheme", withKeys, keyGold, "", "", ErrInvalidAPIKey},
		{"another scheme", withKeys, "Basic " + keyGold, "", "", ErrInvalidAPIKey},
		{"two tokens", withKeys, "Bearer " + keyGold + " " + keySilver, "", "", ErrInvalidAPIKey},
		{"a key's prefix is not the key", withKeys, "Bearer " + keyGold[:len(keyGold)-1], "", "", ErrInvalidAPIKey},
		{"no keys configured: default", noKeys, "", "", "default", nil},
		{"no keys configured: any bearer is ignored", noKeys, "Bearer whatever", "", "default", nil},
		{"trusted header selects", withKeys, "", "silver", "silver", nil},
		{"trusted header wins over a key", withKeys, "Bearer " + keyGold, "silver", "silver", nil},
		{"trusted header with an unknown name", withKeys, "Bearer " + keyGold, "platinum", "", ErrUnknownPartition},
		{"trusted header absent: the key decides", withKeys, "Bearer " + keyGold, "", "gold", nil},
		{"header ignored when not configured", noHeader, "Bearer " + keyGold, "silver", "gold", nil},
		{"header ignored when not configured, even unknown", noHeader, "Bearer " + keyGold, "platinum", "gold", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.r.Resolve(tt.authorization, tt.header)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				for _, key := range []string{keyGold, keyGold2, keySilver, "sk-nobody", keyGold[:len(keyGold)-1]} {
					assert.NotContains(t, err.Error(), key, "an error never carries a key")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	assert.Equal(t, "X-Kvgate-Partition", withKeys.TrustedHeader())
}

func TestResolverConstruction(t *testing.T) {
	tests := []struct {
		name  string
		parts []Partition
		def   string
	}{
		{"key shared by two partitions", []Partition{{Name: "a", Weight: 1, APIKeys: []string{keyGold}}, {Name: "b", Weight: 1, APIKeys: []string{keyGold}}}, "a"},
		{"key repeated in one partition", []Partition{{Name: "a", Weight: 1, APIKeys: []string{keyGold, keyGold}}}, "a"},
		{"empty key", []Partition{{Name: "a", Weight: 1, APIKeys: []string{""}}}, "a"},
		{"key with whitespace", []Partition{{Name: "a", Weight: 1, APIKeys: []string{" " + keyGold}}}, "a"},
		{"unknown default", []Partition{{Name: "a", Weight: 1}}, "b"},
		{"no partitions", nil, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewResolver(tt.parts, tt.def, "")
			require.Error(t, err)
			assert.False(t, strings.Contains(err.Error(), keyGold), "an error never carries a key: %v", err)
		})
	}
}

// The resolver keeps digests only: no configured key survives in it.
func TestResolverKeepsNoKeyInClear(t *testing.T) {
	parts := keyedPartitions()
	r, err := NewResolver(parts, "default", "")
	require.NoError(t, err)
	for d := range r.byDigest {
		for _, key := range []string{keyGold, keyGold2, keySilver} {
			assert.NotContains(t, string(d[:]), key)
		}
	}
	parts[1].APIKeys[0] = "changed" // the caller's slice is not referenced either
	got, err := r.Resolve("Bearer "+keyGold, "")
	require.NoError(t, err)
	assert.Equal(t, "gold", got)
}

func BenchmarkResolve(b *testing.B) {
	r, err := NewResolver(keyedPartitions(), "default", "")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve("Bearer "+keySilver, ""); err != nil {
			b.Fatal(err)
		}
	}
}
