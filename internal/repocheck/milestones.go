// Package repocheck holds checks over the repository's tracked files that
// run with `make test`.
package repocheck

import (
	"regexp"
	"strings"
)

// Internal milestone words: the project's history belongs in git log (and
// CHANGELOG.md), not in code, comments or docs a user reads.
var (
	// The word stop followed by a number (a space or # between): anywhere.
	stopWord = regexp.MustCompile(`(?i)\bstop[ \t]*#?[ \t]*[0-9]+\b`)
	// The word issue or issues followed by a number: anywhere but
	// CHANGELOG.md.
	issueWord = regexp.MustCompile(`(?i)\bissues?[ \t]*#?[ \t]*[0-9]+\b`)
	// An upstream issue named by its tracker (the word GitHub or upstream,
	// or an owner/repo, right before it) is a citation, not our milestone.
	upstreamQualifier = regexp.MustCompile(`(?i)(github|upstream|[a-z0-9_.-]+/[a-z0-9_.-]+)[ \t]*$`)
)

// Finding is one milestone word in a file.
type Finding struct {
	Path string
	Line int
	Text string
}

// ScanMilestoneWords returns the milestone words in one file's content.
func ScanMilestoneWords(path string, content string) []Finding {
	var out []Finding
	changelog := strings.EqualFold(path, "CHANGELOG.md")
	for i, line := range strings.Split(content, "\n") {
		for _, m := range stopWord.FindAllString(line, -1) {
			out = append(out, Finding{Path: path, Line: i + 1, Text: m})
		}
		if changelog {
			continue
		}
		for _, loc := range issueWord.FindAllStringIndex(line, -1) {
			if upstreamQualifier.MatchString(line[:loc[0]]) {
				continue
			}
			out = append(out, Finding{Path: path, Line: i + 1, Text: line[loc[0]:loc[1]]})
		}
	}
	return out
}
