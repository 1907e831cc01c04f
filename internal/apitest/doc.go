// Package apitest holds tests that cover the API of xdpfab's product
// packages (av, bpf, client, cq, ctl, dataplane, ep, fi, loader, neigh,
// stack, wire) as a whole rather than one package at a time: no exported
// method or function panics when given nil and zero values (issue 10), and
// every exported type with methods is in the list that checks it, so a new
// one cannot be left out. It has no code outside its tests.
package apitest
