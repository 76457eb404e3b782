// Package eventually is the tests' one way to wait for something that
// real parts (a database, an API server, another process) make true in
// their own time: poll a condition until it holds or a bound passes, and
// fail saying what never happened. Timing logic of our own is tested
// with testing/synctest instead, where waiting costs nothing.
package eventually
