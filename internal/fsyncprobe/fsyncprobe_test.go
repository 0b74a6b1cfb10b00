package fsyncprobe

import (
	"os"
	"testing"
	"time"
)

func TestRunCountsSyncsAndLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	rate, err := Run(dir, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Fatalf("rate = %v, want > 0", rate)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the probe left %d files behind", len(left))
	}
}

func TestRunReportsAMissingDirectory(t *testing.T) {
	if _, err := Run(t.TempDir()+"/missing", time.Millisecond); err == nil {
		t.Fatal("a probe of a missing directory succeeded")
	}
}
