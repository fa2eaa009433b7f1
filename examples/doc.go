// Package examples holds the reviewauth example programs, in a module of
// their own so that importing the library never pulls in what they need.
package examples
