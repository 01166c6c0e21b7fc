package suggest

import "testing"

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"hermes", "hermes", 0},
		{"hermse", "hermes", 1}, // a swap of neighbours is one edit
		{"hemres", "hermes", 1},
		{"hermes", "herms", 1},
		{"hermes", "xhermes", 1},
		{"hermes", "hermex", 1},
		{"executor", "exector", 1},
		{"ca", "abc", 3}, // optimal string alignment: no edit of a swapped pair
		{"kitten", "sitting", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	progs := []string{"executor", "hermes"}
	tests := []struct {
		s          string
		candidates []string
		want       string
	}{
		{"hermse", progs, "hermes"},
		{"HERMES", progs, "hermes"}, // case is ignored
		{"hermes", progs, ""},       // itself is not a suggestion
		{"worker", progs, ""},
		{"herm", progs, ""},        // 2 edits: too far for a 4-byte name
		{"hrmes", progs, "hermes"}, // 1 edit
		{"exectr", progs, "executor"},
		{"execu", progs, ""},
		{"ab", []string{"ac", "ab2"}, "ac"}, // first of equals wins
		{"executor.imge", []string{"executor.image", "executor.port"}, "executor.image"},
		{"executor.nonsense", []string{"executor.image", "executor.port"}, ""},
		{"HBX_EXECUTOR_PROT", []string{"HBX_EXECUTOR_PORT", "HBX_EXECUTOR_IMAGE"}, "HBX_EXECUTOR_PORT"},
		{"x", nil, ""},
	}
	for _, tt := range tests {
		if got := Closest(tt.s, tt.candidates); got != tt.want {
			t.Errorf("Closest(%q, %q) = %q, want %q", tt.s, tt.candidates, got, tt.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	tests := []struct {
		s          string
		candidates []string
		want       string
	}{
		{"hermse", []string{"executor", "hermes"}, ` (did you mean "hermes"?)`},
		{"worker", []string{"executor", "hermes"}, ""},
		{"a\"b", []string{`a"c`}, ` (did you mean "a\"c"?)`}, // quoted as Go does
	}
	for _, tt := range tests {
		if got := DidYouMean(tt.s, tt.candidates); got != tt.want {
			t.Errorf("DidYouMean(%q, %q) = %q, want %q", tt.s, tt.candidates, got, tt.want)
		}
	}
}
