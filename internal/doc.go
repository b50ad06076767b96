// Package internal names the floors of the tree; it holds no code. Each
// floor imports only the floors beneath it:
//
//	internal/app/      top: the wiring (app, config, metrics, demo), with
//	                   main.go and cmd/ beside it
//	proxy/             the RESP front end
//	netio/             the backend links
//	internal/script/   the script model: sandbox, spec, guard, classify
//	quorum/            the algorithm, standard library only
//	internal/base/     ground: resp, keyslot, acl, buildinfo, gcfloor;
//	                   they import nothing of the project
//	internal/testkit/  for tests only: real processes, faulty links, library
//	                   scripts; it stands on the ground floor
//
// netio and the script floor stand side by side: neither imports the
// other. bench/ and integration/ stand above everything and may import any
// floor.
//
// It promises: layout_test.go fails when a package imports a floor its own
// floor may not (a lower floor a higher one, a floor beside it, production
// code a test kit), or when a directory of Go code belongs to no floor.
package internal
