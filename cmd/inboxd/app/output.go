package app

import (
	"flag"
	"fmt"
)

// jsonFlagVar registers a listing's output flags on fs: --json, and -o
// FORMAT (table, the default, or json), both setting *p; usage says what
// JSON prints.
func jsonFlagVar(fs *flag.FlagSet, p *bool, usage string) {
	fs.BoolVar(p, "json", false, usage)
	fs.Func("o", "output `FORMAT`: table or json (json: "+usage+")", func(s string) error {
		switch s {
		case "json":
			*p = true
		case "table", "text":
			*p = false
		default:
			return fmt.Errorf("-o: %q is neither table nor json", s)
		}
		return nil
	})
}

// jsonFlag is jsonFlagVar for a new bool.
func jsonFlag(fs *flag.FlagSet, usage string) *bool {
	p := new(bool)
	jsonFlagVar(fs, p, usage)
	return p
}
