package main

import (
	"fmt"
	"go/types"
	"slices"
	"strings"
)

// digest lists pkg's exported API, one sorted line per name, field and
// method, in the style of Go's api/ files:
//
//	pkg queue, func Open(context.Context, string, ...Option) (*Queue, error)
//	pkg queue, method (*Queue) Close(context.Context) error
//	pkg queue, type Stats struct, Pending int64
func digest(pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	typ := func(t types.Type) string { return types.TypeString(t, qual) }
	var lines []string
	add := func(format string, args ...any) {
		lines = append(lines, "pkg "+pkg.Name()+", "+fmt.Sprintf(format, args...))
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s", name, typ(o.Type()))
			add("const %s = %s", name, o.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, typ(o.Type()))
		case *types.Func:
			add("func %s%s", name, signature(o.Type().(*types.Signature), typ))
		case *types.TypeName:
			if o.IsAlias() {
				add("type %s = %s", name, typ(types.Unalias(o.Type())))
				continue
			}
			named := o.Type().(*types.Named)
			head := name + typeParams(named.TypeParams(), typ)
			switch u := named.Underlying().(type) {
			case *types.Struct:
				add("type %s struct", head)
				for f := range u.Fields() {
					switch {
					case !f.Exported():
					case f.Embedded():
						add("type %s struct, embedded %s", head, typ(f.Type()))
					default:
						add("type %s struct, %s %s", head, f.Name(), typ(f.Type()))
					}
				}
			case *types.Interface:
				var names []string
				for m := range u.Methods() {
					if m.Exported() {
						names = append(names, m.Name())
					} else {
						names = append(names, "unexported methods")
					}
				}
				names = slices.Compact(names)
				add("type %s interface { %s }", head, strings.Join(names, ", "))
				for m := range u.Methods() {
					if m.Exported() {
						add("type %s interface, %s%s", head, m.Name(), signature(m.Type().(*types.Signature), typ))
					}
				}
			default:
				add("type %s %s", head, typ(u))
			}
			for m := range named.Methods() {
				if !m.Exported() {
					continue
				}
				sig := m.Type().(*types.Signature)
				add("method (%s) %s%s", typ(sig.Recv().Type()), m.Name(), signature(sig, typ))
			}
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// signature writes sig without parameter names: "(T1, ...T2) (R1, R2)".
func signature(sig *types.Signature, typ func(types.Type) string) string {
	var b strings.Builder
	b.WriteString(typeParams(sig.TypeParams(), typ))
	b.WriteByte('(')
	for i := range sig.Params().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			b.WriteString("..." + typ(t.(*types.Slice).Elem()))
		} else {
			b.WriteString(typ(t))
		}
	}
	b.WriteByte(')')
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteString(" " + typ(res.At(0).Type()))
	default:
		b.WriteString(" (")
		for i := range res.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(typ(res.At(i).Type()))
		}
		b.WriteByte(')')
	}
	return b.String()
}

func typeParams(tps *types.TypeParamList, typ func(types.Type) string) string {
	if tps.Len() == 0 {
		return ""
	}
	var parts []string
	for tp := range tps.TypeParams() {
		parts = append(parts, tp.Obj().Name()+" "+typ(tp.Constraint()))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
