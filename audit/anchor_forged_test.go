package audit

import "testing"

// TestForgedSlotOutOfRange: a slot's checksum catches tearing, not
// forgery; a slot whose size is negative or whose hash is malformed is
// refused as damaged before anything sizes a read by it (before: a
// negative size made the next start panic in makeslice).
func TestForgedSlotOutOfRange(t *testing.T) {
	good := Anchor{Seq: 3, Size: 600, Hash: Genesis}
	if a, ok, err := decodeSlot(good.encode()); !ok || err != nil || a != good {
		t.Fatalf("a good slot: %+v %v %v", a, ok, err)
	}
	for _, bad := range []Anchor{
		{Seq: 3, Size: -5, Hash: Genesis},
		{Seq: 3, Size: 600, Hash: "sha256:short"},
		{Seq: 3, Size: 600, Hash: "md5:" + Genesis[7:]},
	} {
		if a, ok, err := decodeSlot(bad.encode()); ok || err == nil {
			t.Errorf("forged slot %+v accepted as %+v", bad, a)
		}
	}
}
