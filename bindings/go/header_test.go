package qsp

// The package's constants against include/qsp/qsp.h (issue 14): every
// QSP_DTYPE_*, status (QSP_OK / QSP_ERR_*), QSP_BACKEND_* and QSP_ROPE_* the
// header defines has a constant in qsp.go, with the same value, and there is
// no other; the library names and sizes every DType.
//
// cgo is not allowed in tests, so the constants are read from qsp.go's
// syntax: DType constants are `NAME DType = C.QSP_DTYPE_NAME` (their value is
// the header's by construction; the name must match), Backend and RoPE ones
// likewise, Status ones integer literals compared with the header's.
//
// Environment: QSP_HEADER_DIR, the directory of qsp.h (ctest sets it).

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// headerConstants: prefix ("DTYPE", "ERR", "BACKEND", "ROPE") -> NAME -> value.
func headerConstants(t *testing.T) map[string]map[string]int64 {
	dir := os.Getenv("QSP_HEADER_DIR")
	if dir == "" {
		t.Skip("QSP_HEADER_DIR is not set (ctest sets it)")
	}
	b, err := os.ReadFile(filepath.Join(dir, "qsp.h"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{"DTYPE": {}, "ERR": {}, "BACKEND": {}, "ROPE": {}}
	re := regexp.MustCompile(`(?m)^#define\s+QSP_(\w+)\s+\(?\s*(-?\d+)\s*\)?`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "OK" {
			out["ERR"]["OK"] = v
			continue
		}
		for prefix := range out {
			if strings.HasPrefix(m[1], prefix+"_") {
				out[prefix][strings.TrimPrefix(m[1], prefix+"_")] = v
			}
		}
	}
	return out
}

// upperSnake: "OutOfRange" -> "OUT_OF_RANGE", "DType" -> "DTYPE", "IO" -> "IO".
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' && s[i-1] >= 'a' && s[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

type goConst struct {
	name  string // as the header spells it, without the prefix
	value int64  // for literals
	cName string // for C.QSP_* values: the macro without "QSP_"
}

// packageConstants reads qsp.go's constants by family.
func packageConstants(t *testing.T) map[string][]goConst {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "qsp.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]goConst{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) != 1 || len(vs.Values) != 1 {
				continue
			}
			name := vs.Names[0].Name
			typ := ""
			if id, ok := vs.Type.(*ast.Ident); ok {
				typ = id.Name
			}
			c := goConst{}
			switch v := vs.Values[0].(type) {
			case *ast.SelectorExpr:
				if x, ok := v.X.(*ast.Ident); ok && x.Name == "C" {
					c.cName = strings.TrimPrefix(v.Sel.Name, "QSP_")
				}
			case *ast.BasicLit:
				c.value, _ = strconv.ParseInt(v.Value, 0, 64)
			case *ast.UnaryExpr:
				if lit, ok := v.X.(*ast.BasicLit); ok && v.Op == token.SUB {
					n, _ := strconv.ParseInt(lit.Value, 0, 64)
					c.value = -n
				}
			}
			switch {
			case typ == "DType":
				c.name = name
				out["DTYPE"] = append(out["DTYPE"], c)
			case typ == "Status":
				c.name = upperSnake(strings.TrimPrefix(name, "Status"))
				out["ERR"] = append(out["ERR"], c)
			case typ == "Backend":
				c.name = strings.ToUpper(strings.TrimPrefix(name, "Backend"))
				out["BACKEND"] = append(out["BACKEND"], c)
			case strings.HasPrefix(name, "Rope"):
				c.name = strings.ToUpper(strings.TrimPrefix(name, "Rope"))
				out["ROPE"] = append(out["ROPE"], c)
			}
		}
	}
	return out
}

func TestConstantsMatchHeader(t *testing.T) {
	header := headerConstants(t)
	pkg := packageConstants(t)
	for family, want := range header {
		if len(want) == 0 {
			t.Fatalf("no QSP_%s_* in qsp.h", family)
		}
		have := map[string]int64{}
		for _, c := range pkg[family] {
			if c.cName != "" {
				// Its value is the macro's: the macro must be the one its name says.
				if c.cName != family+"_"+c.name {
					t.Errorf("%s is C.QSP_%s, want C.QSP_%s_%s", c.name, c.cName, family, c.name)
				}
				v, ok := want[c.name]
				if !ok {
					v = -999999 // not in the header: reported below
				}
				have[c.name] = v
			} else {
				have[c.name] = c.value
			}
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("QSP_%s_*: qsp.go has %v, qsp.h %v", family, have, want)
		}
	}
}

func TestLibraryNamesAndSizesEveryDType(t *testing.T) {
	header := headerConstants(t)
	for name, v := range header["DTYPE"] {
		d := DType(v)
		if got := d.String(); !strings.EqualFold(got, name) {
			t.Errorf("qsp_dtype_name(%d) = %q, want %q", v, got, strings.ToLower(name))
		}
		if GGUFTypeName(int32(v)) != d.String() {
			t.Errorf("qsp_gguf_type_name(%d) = %q", v, GGUFTypeName(int32(v)))
		}
		if d.Size(1, 256) == 0 { // 256: a multiple of every block size
			t.Errorf("qsp_dtype_size(%s, 1, 256) = 0", name)
		}
	}
	for _, s := range []Status{StatusOK - 1, StatusBadFormat, StatusBufferTooSmall} {
		if StatusString(int32(s)) != s.String() {
			t.Errorf("status %d: %q vs %q", s, StatusString(int32(s)), s.String())
		}
	}
}
