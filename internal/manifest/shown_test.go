package manifest

import (
	"bytes"
	"strings"
	"testing"
)

// Rehashed replaces every hash the YAML shows (both hash annotations and
// the spec-hash label) on copies: the objects the agent applies keep
// theirs.
func TestRehashed(t *testing.T) {
	d, err := NewDeployment(webState())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := d.YAML(nil)
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(h string) string { return "k" + h[1:] }
	shown, err := d.Rehashed(keyed)
	if err != nil {
		t.Fatal(err)
	}
	y, err := shown.YAML(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		HashAnnotation + ": " + keyed(d.ServiceHash),
		HashAnnotation + ": " + keyed(d.StatefulSetHash),
		SpecHashLabel + ": " + keyed(webState().GetSpecHash()),
	} {
		if !bytes.Contains(y, []byte(want)) {
			t.Errorf("shown YAML lacks %q:\n%s", want, y)
		}
	}
	for _, h := range []string{d.ServiceHash, d.StatefulSetHash, webState().GetSpecHash()} {
		if bytes.Contains(y, []byte(h)) {
			t.Errorf("shown YAML holds the hash %s:\n%s", h, y)
		}
	}
	if shown.ServiceHash != keyed(d.ServiceHash) || shown.StatefulSetHash != keyed(d.StatefulSetHash) {
		t.Errorf("shown hashes %s, %s", shown.ServiceHash, shown.StatefulSetHash)
	}
	if again, _ := d.YAML(nil); !bytes.Equal(again, plain) {
		t.Errorf("rehashing changed the objects the agent applies:\n%s\nwant\n%s", again, plain)
	}
	if got := strings.Count(string(y), "\n"); got != strings.Count(string(plain), "\n") {
		t.Errorf("shown YAML has %d lines, the applied %d", got, strings.Count(string(plain), "\n"))
	}
}
