package comfygate

import (
	"strings"

	"github.com/spf13/cobra"
)

// parseWithNegativeNumbers parses args into cmd's flags as cobra would,
// except that a negative number where an argument is expected ("grant acme
// -3") is an argument, not a cluster of shorthand flags, so that
// `credits grant <account> -3` needs no "--" before the amount. A negative
// number that is a flag's value (--note -3) stays the flag's value; after
// "--" everything is an argument, as usual. It returns the arguments in
// order.
//
// The command sets DisableFlagParsing and calls this from RunE: pflag
// offers no way to let such a token through (ParseErrorsAllowlist drops
// it), so args are parsed in runs between the negative numbers, each run by
// pflag itself.
func parseWithNegativeNumbers(cmd *cobra.Command, args []string) ([]string, error) {
	fs := cmd.Flags()
	var out []string
	parse := func(run []string) error {
		// pflag keeps the previous run's arguments on an empty run.
		if len(run) == 0 {
			return nil
		}
		if err := fs.Parse(run); err != nil {
			return err
		}
		out = append(out, fs.Args()...)
		return nil
	}
	start := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i = len(args)
		case isNegativeNumber(a):
			if err := parse(args[start:i]); err != nil {
				return nil, err
			}
			out = append(out, a)
			start = i + 1
		case takesNextArg(cmd, a):
			i++ // the flag's value, whatever it looks like
		}
	}
	if err := parse(args[start:]); err != nil {
		return nil, err
	}
	return out, nil
}

// isNegativeNumber reports whether a looks like a negative number (-3,
// -1.5): no flag of these commands is a digit.
func isNegativeNumber(a string) bool {
	return len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9'
}

// takesNextArg reports whether the flag token a takes the next argument as
// its value, as pflag decides: --name or a shorthand cluster ending in a
// flag that needs a value, with no "=" and no value attached.
func takesNextArg(cmd *cobra.Command, a string) bool {
	fs := cmd.Flags()
	if name, ok := strings.CutPrefix(a, "--"); ok {
		f := fs.Lookup(name) // nil also when name has "=value"
		return f != nil && f.NoOptDefVal == ""
	}
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	for i := 1; i < len(a); i++ {
		f := fs.ShorthandLookup(a[i : i+1])
		switch {
		case f == nil:
			return false // pflag refuses it
		case f.NoOptDefVal != "":
			continue // a boolean; the next letter is another flag
		default:
			return i == len(a)-1 // otherwise the rest is its value
		}
	}
	return false
}
