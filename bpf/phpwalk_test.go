package bpf

// The PHP walker's test programs' shared types (bpf/php.h,
// bpf/phpwalk.bpf.c), checked by TestGoTypesMatchObjects.
func init() {
	generatedTypes = append(generatedTypes,
		goLayout{LoadPhpwalk, "php_proc", PhpwalkPhpProc{}},
		goLayout{LoadPhpwalk, "php_walk_input", PhpwalkPhpWalkInput{}},
		goLayout{LoadPhpwalk, "php_walk_record", PhpwalkPhpWalkRecord{}},
	)
}
