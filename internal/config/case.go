package config

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// caseProblems reports the keys of the config file written with capital
// letters. Keys are lowercase; viper would lowercase "Executor.Port" and
// silently merge it with "executor.port". Checked: sections and the keys
// of each section (programs' fields are readPrograms'); never values (a
// program's environment, platform_digests entries), whose keys are data.
func caseProblems(data []byte, src Source) []*Problem {
	var doc map[string]any
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil // viper reported it
	}
	var probs []*Problem
	report := func(path []string) {
		key := strings.Join(path, ".")
		low := strings.ToLower(key)
		probs = append(probs, &Problem{Key: key, Rule: fmt.Sprintf("keys are lowercase (did you mean %q?)", low), Source: src})
	}
	for _, sec := range slices.Sorted(maps.Keys(doc)) {
		if sec != strings.ToLower(sec) {
			report([]string{sec})
		}
		inner, ok := doc[sec].(map[string]any)
		if !ok {
			continue
		}
		if strings.ToLower(sec) == "programs" {
			continue // readPrograms checks programs' fields
		}
		for _, k := range slices.Sorted(maps.Keys(inner)) {
			if k != strings.ToLower(k) {
				report([]string{sec, k})
			}
		}
	}
	return probs
}
