package changefeed_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stateTables are written only through Ent, where the change-feed hooks see
// every write.
var stateTables = []string{"deployments", "deployment_topology", "sentinels", "cilium_network_policies", "instances"}

// rawStateWrite matches the MySQL spellings of a write to a state table t:
// INSERT/REPLACE [modifiers] [INTO] t, DELETE [modifiers] [aliases] FROM t,
// UPDATE [modifiers] t [[AS] alias] SET; t optionally schema-qualified and
// backquoted; any case and spacing.
var rawStateWrite = func() *regexp.Regexp {
	table := "(?:`?\\w+`?\\.)?`?(?:" + strings.Join(stateTables, "|") + ")`?\\b"
	modifiers := `(?:(?:low_priority|high_priority|delayed|quick|ignore)\s+)*`
	return regexp.MustCompile(`(?is)\b(?:` +
		`(?:insert|replace)\s+` + modifiers + `(?:into\s+)?` + table +
		`|delete\s+` + modifiers + `(?:\w+(?:\s*,\s*\w+)*\s+)?from\s+` + table +
		`|update\s+` + modifiers + table + `(?:\s+as)?(?:\s+\w+)?\s+set\b)`)
}()

var generatedMarker = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// No hand-written Go file may write a state table with raw SQL: such a
// write would bypass the hooks and emit no change row, the very bug the
// source design shipped.
func TestNoRawSQLWritesToStateTables(t *testing.T) {
	root := moduleRoot(t)
	scanned := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "tools" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "rawsql_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generatedMarker.Match(src) {
			return nil
		}
		scanned++
		for _, loc := range rawStateWrite.FindAllIndex(src, -1) {
			line := bytes.Count(src[:loc[0]], []byte("\n")) + 1
			if strings.HasSuffix(path, "_test.go") && simulatesOlderRows(src, loc[0]) {
				continue
			}
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s:%d: raw SQL write to a state table (%q); go through Ent so the change feed sees it", rel, line, src[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 10 {
		t.Fatalf("scanned only %d hand-written files under %s; the guard is looking in the wrong place", scanned, root)
	}
}

// simulatesOlderRows reports whether the raw write at offset i of a test
// file is marked, on the line before it, as making rows an older ctrld
// wrote ("// rawsql: older rows: ..."): a column an older version did not
// fill is immutable in Ent, so only raw SQL can empty it again. Only
// tests may say so; what they write is read back by the test itself.
func simulatesOlderRows(src []byte, i int) bool {
	start := bytes.LastIndexByte(src[:i], '\n')
	if start < 0 {
		return false
	}
	prev := bytes.LastIndexByte(src[:start], '\n')
	return bytes.Contains(src[prev+1:start], []byte("// rawsql: older rows:"))
}

// The guard's pattern catches the ways raw SQL writes are spelled, and not
// reads or the outbox table.
func TestRawSQLPattern(t *testing.T) {
	caught := []string{
		"INSERT INTO deployment_topology (a) VALUES (1)",
		"insert ignore into `sentinels` values ()",
		"UPDATE deployments SET image = ?",
		"update\n\tcilium_network_policies set spec = ?",
		"DELETE FROM instances WHERE id = 1",
		"UPDATE deployment_topology t SET replicas = 1",
		"REPLACE INTO sentinels VALUES ()",
		"INSERT deployments (id) VALUES (?)",
		"REPLACE sentinels VALUES ()",
		"INSERT LOW_PRIORITY INTO instances VALUES ()",
		"DELETE IGNORE FROM sentinels",
		"DELETE QUICK FROM deployments WHERE 1",
		"DELETE t FROM deployments t WHERE t.id = ?",
		"UPDATE LOW_PRIORITY deployments SET image = ?",
		"UPDATE deploysync.deployments SET image = ?",
		"insert into `deploysync`.`sentinels` values ()",
	}
	allowed := []string{
		"SELECT * FROM deployment_topology",
		"DELETE FROM deployment_changes WHERE pk < ?",
		"INSERT INTO deployment_changes (pk) VALUES (?)",
		"UPDATE deployments_archive SET x = 1",
		"// update deployments in every region, then set the status",
		"DELETE FROM deployment_changes_archive",
		"INSERT INTO deployments_archive VALUES ()",
	}
	for _, s := range caught {
		if !rawStateWrite.MatchString(s) {
			t.Errorf("guard misses %q", s)
		}
	}
	for _, s := range allowed {
		if rawStateWrite.MatchString(s) {
			t.Errorf("guard flags %q", s)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(data, []byte("module github.com/deploysync/deploysync\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("module root not found")
		}
		dir = parent
	}
}
