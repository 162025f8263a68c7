package lint

import (
	"fmt"
	"io"
)

// Report writes one line per document (skipped ones only when verbose),
// each refusal's field errors and each warning under it, and a summary.
func Report(w io.Writer, results []Result, verbose bool) {
	counts := map[Verdict]int{}
	for _, r := range results {
		counts[r.Verdict]++
		if r.Verdict == Skipped && !verbose {
			continue
		}
		fmt.Fprintf(w, "%s: %s: %s\n", r.Doc.Where(), r.Object(), r.Verdict)
		switch {
		case len(r.Causes) > 0:
			for _, c := range r.Causes {
				fmt.Fprintf(w, "  %s: %s\n", c.Field, c.Message)
			}
		case r.Err != nil:
			fmt.Fprintf(w, "  %v\n", r.Err)
		}
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "  Warning: %s\n", warn)
		}
		for _, note := range r.Notes {
			fmt.Fprintf(w, "  Note: %s\n", note)
		}
	}
	fmt.Fprintf(w, "%d documents: %d created, %d updated, %d refused, %d skipped\n",
		len(results), counts[Created], counts[Updated], counts[Refused], counts[Skipped])
}
