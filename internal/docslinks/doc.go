// Package docslinks holds no product code: its test keeps the operator's
// README.md and the pages under docs/ linked together. Every relative link
// in them must name a file or directory of the repository, and every
// #anchor must name a heading of its target page, spelled the way GitHub
// makes heading anchors (lower case, punctuation dropped, spaces to
// hyphens, -1, -2 ... for repeated headings).
//
// It checks links only, not what they say: links to the web (http, https,
// mailto) are not followed, and text inside code spans and fenced code
// blocks is not read as links.
package docslinks
