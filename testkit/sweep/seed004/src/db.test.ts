// The app has no database yet: this file holds its tests when it does.
export {};
